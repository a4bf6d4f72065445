#pragma once
// Files the collector opens because a segment names them: the source file of a Python frame, a
// loaded module. A name is only a string someone wrote into shared memory: it may name a FIFO
// (whose open blocks until a writer comes), a device that never ends (/dev/zero) or a terminal.
// Only regular files are opened, and never in a way that can block.
#include <cstddef>
#include <optional>
#include <string>

namespace trainshim::collector {

// Largest source file whose lines are shown, and longest line kept (longer ones are cut). A
// Python source file past these is generated, not written by the person reading the report.
inline constexpr std::size_t kMaxSourceFileBytes = 16u << 20;
inline constexpr std::size_t kMaxSourceLineBytes = 4096;

// A descriptor of `path` if it is a regular file, opened O_RDONLY | O_NONBLOCK | O_CLOEXEC |
// O_NOCTTY, else -1. Symbolic links are followed: Python installations and virtual environments
// reach their sources through links (lib/python3 -> python3.11, venv/lib -> lib64), and the
// collector reads only what the user it runs as may read anyway.
int open_regular_file(const std::string& path);

// The contents of the regular file `path`, empty if it is not one or is larger than `max_bytes`.
std::optional<std::string> read_regular_file(const std::string& path, std::size_t max_bytes);

}  // namespace trainshim::collector
