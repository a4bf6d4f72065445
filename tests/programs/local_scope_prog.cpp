// Loads local_scope_lib with RTLD_LOCAL (the program itself does not link cudart) and calls it.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  auto copy = reinterpret_cast<int (*)(int)>(dlsym(lib, "copy_from_local_scope"));
  return copy ? copy(7) : 1;
}
