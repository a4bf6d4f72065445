// Loads a library with RTLD_LOCAL (the program itself links no CUDA library) and calls its
// int FUNCTION(int times), copy_from_local_scope unless named:   local_scope_prog LIBRARY [FUNCTION]
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  auto function = reinterpret_cast<int (*)(int)>(dlsym(lib, argc > 2 ? argv[2] : "copy_from_local_scope"));
  return function ? function(7) : 1;
}
