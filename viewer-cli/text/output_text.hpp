#pragma once
// Recorded strings (commands, host names, file and function names, source lines) are bytes the
// job chose: not necessarily UTF-8, possibly control characters. Everything the CLI prints or
// writes passes through one of these, so that no output format breaks and no escape sequence of
// a recording reaches a terminal.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace trainshim::cli {

// Each byte sequence that is not UTF-8 becomes U+FFFD, as JSON's `replace` does: the key a site
// has in a baseline file is the one it has in the database it was written from.
std::string valid_utf8(std::string_view text);

// For a terminal or a text/markdown file: valid UTF-8 (as valid_utf8), and C0 controls other than
// newline, DEL and C1 controls written as \xHH (C1 as \u00HH), so a recording cannot move the
// cursor, retitle the window or clear the screen.
std::string terminal_text(std::string_view text);

// Text for a reader (the report, diff, audit and dump in text or markdown): terminal_text with the
// paths under `directory` (the current one, where the reader runs the command) written relative to
// it: "scripts/train.py:66", not "/home/me/project/scripts/train.py:66". JSON keeps them whole.
std::string reader_text(std::string_view text, const std::string& directory);
std::string reader_text(std::string_view text);  // under the current directory

// XML 1.0 character data or attribute value: valid UTF-8, the five markup characters escaped,
// and the C0 controls XML 1.0 does not allow (all but tab, newline, carriage return) and
// U+FFFE/U+FFFF dropped.
std::string xml_text(std::string_view text);

// A JSON document as text; bytes that are not UTF-8 become U+FFFD instead of failing the dump.
std::string json_text(const nlohmann::json& document, int indent = 2);
std::string json_text(const nlohmann::ordered_json& document, int indent = 2);

}  // namespace trainshim::cli
