#include "resolve.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <string>

namespace trainshim::shim {

namespace detail {
std::atomic<void*> g_real[kApiCount];
}  // namespace detail

namespace {

struct LibraryMatch {
  const char* prefix;
  std::string path;
};

int match_library(dl_phdr_info* info, size_t, void* data) {
  auto* match = static_cast<LibraryMatch*>(data);
  const char* path = info->dlpi_name;
  if (!path || !*path) return 0;
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  if (std::strncmp(base, match->prefix, std::strlen(match->prefix)) != 0) return 0;
  match->path = path;
  return 1;
}

// The handle of an already loaded library, without loading anything new.
void* loaded_library(Library library) {
  LibraryMatch match{library == Library::Cudart ? "libcudart.so" : "libnccl.so", {}};
  dl_iterate_phdr(match_library, &match);
  if (match.path.empty()) return nullptr;
  return dlopen(match.path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
}

void* find(Library library, const char* name) {
  if (void* next = dlsym(RTLD_NEXT, name)) return next;
  void* handle = loaded_library(library);
  if (!handle) return nullptr;
  void* symbol = dlsym(handle, name);
  dlclose(handle);  // drops only the reference RTLD_NOLOAD took
  return symbol;
}

}  // namespace

void* detail::resolve(Api api) {
  const auto index = static_cast<std::size_t>(api);
  const ApiInfo& info = kApis[index];
  // NCCL exports every ncclX also as pncclX, the name a profiler is meant to forward to.
  std::string name = info.library == Library::Nccl ? "p" : "";
  name += info.name;
  void* symbol = find(info.library, name.c_str());
  if (symbol) detail::g_real[index].store(symbol, std::memory_order_release);
  return symbol;
}

void* runtime_function(Library library, const char* name) { return find(library, name); }

}  // namespace trainshim::shim
