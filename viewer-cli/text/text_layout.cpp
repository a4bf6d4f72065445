#include "text/text_layout.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace trainshim::cli {

namespace {

constexpr std::size_t kNarrowest = 40, kContinuationIndent = 4;
constexpr std::string_view kEllipsis = "…";

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Columns aligned by runs of spaces: a table's row, which wrapping would break.
bool table_row(std::string_view line) {
  const std::size_t text = line.find_first_not_of(' ');
  return text != std::string_view::npos && line.find("  ", text) != std::string_view::npos;
}

bool digit(char c) { return c >= '0' && c <= '9'; }

// "35.2", "(13.0", "1,234": a number that a unit may follow.
bool number(std::string_view word) {
  if (!word.empty() && word.front() == '(') word.remove_prefix(1);
  return !word.empty() && digit(word.front()) && digit(word.back());
}

// The pieces a line may break between: words, a number kept with the word after it ("35.2 ms",
// "(13.0 %").
std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  bool joined = false;  // the last piece is a number waiting for its unit
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = std::min(text.find(' ', pos), text.size());
    if (end > pos) {
      const std::string_view word = text.substr(pos, end - pos);
      if (joined)
        words.back() =
            std::string_view(words.back().data(), std::size_t(word.data() + word.size() - words.back().data()));
      else words.push_back(word);
      joined = !joined && number(word);
    }
    pos = end + 1;
  }
  return words;
}

void wrap_line(std::string& out, std::string_view line, std::size_t width) {
  const std::size_t indent = line.find_first_not_of(' ');
  const std::string continuation(indent + kContinuationIndent, ' ');
  std::string current(indent, ' ');
  std::size_t current_width = indent;
  bool empty = true;
  for (std::string_view word : words_of(line.substr(indent))) {
    const std::size_t word_width = display_width(word);
    if (!empty && current_width + 1 + word_width > width) {
      out += current + "\n";
      current = continuation;
      current_width = continuation.size();
      empty = true;
    }
    if (!empty) {
      current += ' ';
      ++current_width;
    }
    current += word;
    current_width += word_width;
    empty = false;
  }
  out += current + "\n";
}

}  // namespace

std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (char c : text) width += !continuation_byte(c);
  return width;
}

std::string cut_to_width(std::string_view name, std::size_t width) {
  if (display_width(name) <= width) return std::string(name);
  if (width <= display_width(kEllipsis)) return std::string(kEllipsis.substr(0, width ? kEllipsis.size() : 0));
  // The byte where the text that fits before the ellipsis ends.
  std::size_t limit = 0;
  for (std::size_t columns = 0; limit < name.size(); ++limit)
    if (!continuation_byte(name[limit]) && ++columns > width - 1) break;
  std::size_t cut = 0;
  for (std::size_t i = 1; i <= limit; ++i) {
    const char before = name[i - 1];
    if (before == ' ' || before == ',' || before == '(' || before == '<' ||
        (before == ':' && i >= 2 && name[i - 2] == ':'))
      cut = i;
  }
  // A boundary in the first half would throw away most of what fits: cut there at a code point.
  if (cut < limit / 2) cut = limit;
  std::string_view kept = name.substr(0, cut);
  while (!kept.empty() && kept.back() == ' ') kept.remove_suffix(1);
  return std::string(kept) + std::string(kEllipsis);
}

std::string fit_to_width(std::string_view text, std::size_t width) {
  if (width == 0) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = text.find('\n', pos);
    const std::string_view line = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (display_width(line) <= width || table_row(line) || line.find_first_not_of(' ') == std::string_view::npos)
      out += std::string(line) + "\n";
    else wrap_line(out, line, width);
    if (end == std::string_view::npos) {
      out.pop_back();  // the text's last line had no newline
      break;
    }
    pos = end + 1;
  }
  return out;
}

std::size_t output_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const unsigned long value = std::strtoul(columns, &end, 10);
    if (end != columns && *end == '\0' && value >= kNarrowest && value <= 10000) return value;
  }
  winsize size{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col >= kNarrowest)
    return size.ws_col;
  return 0;
}

bool use_color(ColorMode mode) {
  if (mode != ColorMode::Auto) return mode == ColorMode::Always;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return (!no_color || !*no_color) && isatty(STDOUT_FILENO) && !(term && std::string_view(term) == "dumb");
}

std::string colorize(std::string_view text) {
  static constexpr std::string_view kReset = "\x1b[0m";
  struct Mark {
    std::string_view text, color;
  };
  static constexpr Mark kMarks[] = {
      {"[high]", "\x1b[1;31m"}, {"[medium]", "\x1b[33m"}, {"<- straggler", "\x1b[1;31m"}, {"    OFF ", "\x1b[33m"}};
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.front() != ' ') {
      out += "\x1b[1m" + std::string(line) + std::string(kReset);
    } else {
      for (const Mark& mark : kMarks) {
        const std::size_t at = line.find(mark.text);
        if (at == std::string_view::npos) continue;
        out += std::string(line.substr(0, at)) + std::string(mark.color) + std::string(mark.text) + std::string(kReset);
        line.remove_prefix(at + mark.text.size());
        break;
      }
      out += line;
    }
    if (end < text.size()) out += '\n';
    pos = end + 1;
  }
  return out;
}

}  // namespace trainshim::cli
