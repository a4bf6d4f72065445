#pragma once
// Which Python files are the user's own: shared by the collector (hang reports) and the CLI
// (sync sites), so that both name the same frame.
#include <cctype>
#include <string_view>

namespace trainshim {

// The standard library (.../lib/python3.X/), installed packages and frozen modules are not the
// user's; a user's /home/u/lib/python_tools/ is.
inline bool is_library_python_file(std::string_view file) {
  const auto lib = file.find("/lib/python");
  const bool stdlib = lib != std::string_view::npos && lib + 11 < file.size() &&
                      std::isdigit(static_cast<unsigned char>(file[lib + 11]));
  return stdlib || file.find("/site-packages/") != std::string_view::npos ||
         file.find("/dist-packages/") != std::string_view::npos || file.starts_with("<");
}

}  // namespace trainshim
