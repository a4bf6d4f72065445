#include "environment.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace trainshim::shim {

void say(std::string_view message) {
  std::string line = "trainshim: ";
  line.append(message);
  line.push_back('\n');
  [[maybe_unused]] auto ignored = write(STDERR_FILENO, line.data(), line.size());
}

uint32_t environment_count(const char* name, uint32_t fallback, uint32_t limit) {
  return environment_number(name, fallback, 1, limit);
}

// The variable's value when the whole string is a decimal number from `minimum` to `limit`. Anything
// else ("-1", "1e3", "abc", "0" for a count, too large) gets the default and a warning naming what was
// refused: strtoul would wrap "-1" to the maximum, a 2.9 GB segment per process.
uint32_t environment_number(const char* name, uint32_t fallback, uint32_t minimum, uint32_t limit) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  uint64_t parsed = 0;
  const char* c = value;
  for (; *c >= '0' && *c <= '9' && parsed <= limit; ++c) parsed = parsed * 10 + uint64_t(*c - '0');
  if (*c == '\0' && parsed >= minimum && parsed <= limit) return uint32_t(parsed);
  std::string shown(value, std::min<std::size_t>(std::strlen(value), 64));
  for (char& ch : shown)
    if ((unsigned char)ch < 0x20 || ch == 0x7f) ch = '?';  // nothing that moves the terminal's cursor
  say(std::string(name) + "=\"" + shown + "\" is not a whole number from " + std::to_string(minimum) + " to " +
      std::to_string(limit) + ": using the default " + std::to_string(fallback));
  return fallback;
}

bool environment_flag_off(const char* name) {
  const char* value = std::getenv(name);
  return value &&
         (std::string_view(value) == "0" || std::string_view(value) == "off" || std::string_view(value) == "false");
}

}  // namespace trainshim::shim
