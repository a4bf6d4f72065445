#pragma once
// Text laid out for the reader's terminal: its width, names cut where a reader expects, colour.
// Applied to the finished text (after terminal_text): what a recording put in a line is already
// escaped, so the colour sequences added here are the only ones a terminal sees.
#include <cstddef>
#include <string>
#include <string_view>

namespace trainshim::cli {

// Columns a line takes: UTF-8 code points (the report writes no wide characters of its own).
std::size_t display_width(std::string_view text);

// `name` in at most `width` columns: cut after the last token boundary that fits (a space, a comma,
// "::", an opening bracket) and ended with "…", so a demangled kernel name loses its tail, never
// half a word. Unchanged when it fits.
std::string cut_to_width(std::string_view name, std::size_t width);

// Each line wider than `width` wrapped at spaces, its continuation indented 4 past the line's own
// indent. Table rows (columns aligned by runs of spaces) are kept whole, and so is a word longer
// than the line (a path stays one piece to copy). A width of 0: unchanged.
std::string fit_to_width(std::string_view text, std::size_t width);

// The width to fit: $COLUMNS when it is a number of at least 40, else the terminal's on standard
// output; 0 (no fitting) for a pipe or a file, whose lines a program may search whole.
std::size_t output_width();

enum class ColorMode { Auto, Always, Never };
// Whether to colour standard output: Always, Never, or Auto: a terminal that is not "dumb" and no
// $NO_COLOR (https://no-color.org).
bool use_color(ColorMode mode);

// Section headings in bold, severities and the straggler in colour: [high] red, [medium] yellow,
// a setup item that is OFF yellow.
std::string colorize(std::string_view text);

}  // namespace trainshim::cli
