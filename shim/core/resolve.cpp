#include "resolve.hpp"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <string>
#include <vector>

namespace trainshim::shim {

namespace detail {
std::atomic<void*> g_real[kApiCount];
}  // namespace detail

namespace {

// Where libtrainshim itself is mapped: a symbol found there is the hook, never the real function.
const void* own_base() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<const void*>(&own_base), &info) ? info.dli_fbase : nullptr;
  }();
  return base;
}

void* outside_shim(void* symbol) {
  Dl_info info{};
  if (!symbol || !dladdr(symbol, &info) || info.dli_fbase == own_base()) return nullptr;
  return symbol;
}

int collect_path(dl_phdr_info* info, size_t, void* data) {
  // The main program (empty name) is skipped: its definitions come before the shim's in the
  // global scope, so the program never calls the shim for them.
  if (info->dlpi_name && *info->dlpi_name) static_cast<std::vector<std::string>*>(data)->emplace_back(info->dlpi_name);
  return 0;
}

// Asks every loaded object, whatever its name and scope, for the symbol. Libraries are found by
// what they export, not by soname: wheels bundle libcudart under a hashed name
// (libcudart-<sha8>.so.12, PyTorch's build_common.sh), libtorch_cuda links NCCL statically, and a
// Python extension's libraries live in a local scope that RTLD_NEXT does not search.
void* exported_by_any_object(const char* name) {
  std::vector<std::string> paths;
  dl_iterate_phdr(collect_path, &paths);
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);  // never loads anything new
    if (!handle) continue;
    void* symbol = outside_shim(dlsym(handle, name));
    dlclose(handle);  // drops only the reference RTLD_NOLOAD took
    if (symbol) return symbol;
  }
  return nullptr;
}

// Keeps the object that defines `symbol` mapped for the rest of the process. Its address is
// cached, and a program that dlcloses the runtime and loads another would otherwise make the next
// hooked call jump into unmapped memory. Calls then keep going to the first runtime; checking on
// each call that it is still loaded would take the loader's lock in the hook's fast path.
void* pinned(void* symbol) {
  Dl_info info{};
  if (!symbol || !dladdr(symbol, &info) || !info.dli_fname || !*info.dli_fname) return symbol;
  // RTLD_NOLOAD never loads anything; RTLD_NODELETE outlives the reference, which is dropped.
  if (void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) dlclose(handle);
  return symbol;
}

void* find(const char* name) {
  if (void* next = outside_shim(dlsym(RTLD_NEXT, name))) return pinned(next);
  return pinned(exported_by_any_object(name));
}

void* find(Library library, const char* name) {
  if (library != Library::Nccl) return find(name);
  // NCCL exports every ncclX also as pncclX (NCCL_API with PROFAPI, the default), the name a
  // profiler forwards to. Built without it, only ncclX exists: the definition of another object.
  const std::string unprefixed = name[0] == 'p' ? name + 1 : name;
  if (void* profiling = find(("p" + unprefixed).c_str())) return profiling;
  return find(unprefixed.c_str());
}

}  // namespace

void* detail::resolve(Api api) {
  const auto index = static_cast<std::size_t>(api);
  const ApiInfo& info = kApis[index];
  const std::string name(info.name);
  void* symbol = find(info.library, name.c_str());
  if (symbol) detail::g_real[index].store(symbol, std::memory_order_release);
  return symbol;
}

void* runtime_function(Library library, const char* name) { return find(library, name); }

}  // namespace trainshim::shim
