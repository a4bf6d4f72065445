#include "text/output_text.hpp"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <system_error>

namespace trainshim::cli {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), 0 if there is none.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  const unsigned lead = byte(i);
  const auto continuation = [&](std::size_t k, unsigned low = 0x80, unsigned high = 0xBF) {
    return byte(k) >= low && byte(k) <= high;
  };
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(i + 1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string terminal_text(std::string_view raw) {
  // Invalid sequences first: a lone byte 0x9B is CSI to a terminal in an 8-bit locale.
  const std::string text = valid_utf8(raw);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0u;
    if ((c < 0x20 && c != '\n') || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {
      // U+0080..U+009F: a UTF-8 terminal takes U+009B as CSI, as it takes ESC [.
      out += fmt::format("\\u{:04x}", next);
      ++i;
    } else {
      out.push_back(char(c));
    }
  }
  return out;
}

std::string xml_text(std::string_view raw) {
  const std::string text = valid_utf8(raw);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\t':
      case '\n':
      case '\r':
        out.push_back(c);
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) break;
        if (text.compare(i, 3, "\xEF\xBF\xBE") == 0 || text.compare(i, 3, "\xEF\xBF\xBF") == 0) {
          i += 2;
          break;
        }
        out.push_back(c);
    }
  }
  return out;
}

std::string json_text(const nlohmann::json& document, int indent) {
  return document.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_text(const nlohmann::ordered_json& document, int indent) {
  return document.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string reader_text(std::string_view text, const std::string& directory) {
  const std::string prefix = directory + "/";
  if (directory.size() < 2 || directory.front() != '/') return terminal_text(text);
  // A path starts the text or follows a character no path name has in it before its first '/'.
  const auto starts_path = [&](std::size_t at) {
    if (at == 0) return true;
    const char before = text[at - 1];
    return !(std::isalnum(static_cast<unsigned char>(before)) || before == '/' || before == '.' || before == '_' ||
             before == '-' || before == '~');
  };
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (std::size_t at = text.find(prefix); at != std::string_view::npos; at = text.find(prefix, at + 1)) {
    if (!starts_path(at)) continue;
    out.append(text.substr(from, at - from));
    from = at + prefix.size();
  }
  out.append(text.substr(from));
  return terminal_text(out);
}

std::string reader_text(std::string_view text) {
  std::error_code error;
  const std::filesystem::path here = std::filesystem::current_path(error);
  return reader_text(text, error ? std::string() : here.string());
}

}  // namespace trainshim::cli
