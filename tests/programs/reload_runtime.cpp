// reload_runtime FIRST SECOND: loads the runtime FIRST, copies through the global scope, unloads
// it, loads SECOND (another file with the same soname) and copies again. The reliability review's
// §4: the shim's cached pointer into FIRST outlived it and the second copy jumped into unmapped
// memory.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

using Copy = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);

int copy_through_global_scope() {
  char source[64] = {}, target[64];
  const auto copy = reinterpret_cast<Copy>(dlsym(RTLD_DEFAULT, "cudaMemcpyAsync"));
  return copy ? int(copy(target, source, sizeof source, cudaMemcpyHostToHost, nullptr)) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  void* first = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!first) return 2;
  std::printf("first copy %d\n", copy_through_global_scope());
  dlclose(first);
  // Takes the address range the first runtime left, as any later load may.
  void* filler = dlopen("libz.so.1", RTLD_NOW);
  if (!dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) return 2;
  std::printf("second copy %d\n", copy_through_global_scope());
  if (filler) dlclose(filler);
  return 0;
}
