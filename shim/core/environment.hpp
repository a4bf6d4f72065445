#pragma once
// The shim's dialogue with the user: the TRAINSHIM_* settings it reads, and the lines it writes
// on the job's stderr.
#include <cstdint>
#include <string_view>

namespace trainshim::shim {

// Writes "trainshim: <message>" to stderr with one write (no stdio in someone else's process).
void say(std::string_view message);

// The variable's value when the whole string is a decimal number from 1 to `limit`, else
// `fallback` (with a warning when the variable was set).
uint32_t environment_count(const char* name, uint32_t fallback, uint32_t limit);

// As environment_count, from `minimum` (0 allowed) to `limit`.
uint32_t environment_number(const char* name, uint32_t fallback, uint32_t minimum, uint32_t limit);

// Whether the variable turns something off ("0", "off", "false").
bool environment_flag_off(const char* name);

}  // namespace trainshim::shim
