#pragma once
#include <functional>
#include <ostream>
#include <string>

namespace trainshim::cli {

// Writes what `write` produces to `output`: "-" is standard output; an existing FIFO or device is
// written where it is; anything else under a name of its own beside it first (never a link
// planted there), renamed over it once complete, so that a reader never sees half a file, and
// removed when writing fails. `what` names the output in the messages: "trace", "report"; `flag` the
// option that gave the path. UsageError when the path cannot be written; runtime_error when the
// disk fills up.
void write_output(const std::string& output, const std::string& what, const std::function<void(std::ostream&)>& write,
                  const std::string& flag = "-o");

}  // namespace trainshim::cli
