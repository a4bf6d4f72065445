#pragma once
// Which Python frames are the user's own: shared by the collector (hang reports) and the CLI
// (sync sites), so that both name the same frame.
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

namespace trainshim {

namespace detail {

// inductor's output module: <cache dir>/<h[1:3]>/<h>.py where h = "c" + 51 lowercase base32
// characters (torch/_inductor/codecache.py code_hash and get_path), whatever the cache dir is.
inline bool is_inductor_output_module(std::string_view file) {
  constexpr std::size_t kHash = 52;
  const auto slash = file.rfind('/');
  if (slash == std::string_view::npos || slash < 3) return false;
  const std::string_view name = file.substr(slash + 1);
  if (name.size() != kHash + 3 || !name.ends_with(".py") || name[0] != 'c') return false;
  for (const char c : name.substr(1, kHash - 1))
    if (!((c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'))) return false;
  const std::string_view parent = file.substr(slash - 3, 4);  // "/<h[1:3]>/"
  return parent.front() == '/' && parent.back() == '/' && parent.substr(1, 2) == name.substr(1, 2);
}

// $TORCHINDUCTOR_CACHE_DIR of this process (the job's, when the collector and CLI run under
// `trainshim run`); the default <tmp>/torchinductor_<user> is recognised by its name.
inline bool is_in_inductor_cache(std::string_view file) {
  if (file.find("/torchinductor_") != std::string_view::npos) return true;
  const char* dir = std::getenv("TORCHINDUCTOR_CACHE_DIR");
  std::string_view configured = dir ? dir : "";
  while (configured.size() > 1 && configured.back() == '/') configured.remove_suffix(1);
  return configured.size() > 1 && file.size() > configured.size() && file.starts_with(configured) &&
         file[configured.size()] == '/';
}

}  // namespace detail

// The standard library (.../lib/python3.X/), installed packages, frozen modules and generated
// code ("<eval_with_key>.N" of torch.fx, "<string>") are not the user's; a user's
// /home/u/lib/python_tools/ is. Neither is what torch.compile generates: inductor's output modules
// in its cache directory.
inline bool is_library_python_file(std::string_view file) {
  const auto lib = file.find("/lib/python");
  const bool stdlib = lib != std::string_view::npos && lib + 11 < file.size() &&
                      std::isdigit(static_cast<unsigned char>(file[lib + 11]));
  return stdlib || file.find("/site-packages/") != std::string_view::npos ||
         file.find("/dist-packages/") != std::string_view::npos || file.starts_with("<") ||
         detail::is_in_inductor_cache(file) || detail::is_inductor_output_module(file);
}

// A frame: its file as above, and dynamo's resume functions, which carry the user's file name
// but are code dynamo generated after a graph break (torch/_dynamo/resume_execution.py,
// TORCH_DYNAMO_RESUME_IN_PREFIX): the user's line is the one that called the compiled function.
inline bool is_library_python_frame(std::string_view file, std::string_view function) {
  return is_library_python_file(file) || function.starts_with("torch_dynamo_resume_in_");
}

}  // namespace trainshim
