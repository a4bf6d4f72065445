// A plugin host that embeds CPython from a library it loads and unloads itself (round 2's pyunload):
//   embedded_python LIBPYTHON SCRIPT
// dlopen()s LIBPYTHON, runs SCRIPT (which makes its own CUDA calls through ctypes), finalizes the
// interpreter, dlclose()s the library, then makes 50 recorded copies of its own, 5 ms apart.
// Prints "unloaded mapped=yes|no" (whether the library is still mapped) and "survived".
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "check.hpp"

namespace {

bool mapped(const char* library) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = std::strrchr(library, '/') ? std::strrchr(library, '/') + 1 : library;
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  void* python = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!python) {
    std::printf("dlopen: %s\n", dlerror());
    return 3;
  }
  using Initialize = void (*)();
  using Run = int (*)(const char*);
  using Finalize = int (*)();
  const auto initialize = reinterpret_cast<Initialize>(dlsym(python, "Py_Initialize"));
  const auto run = reinterpret_cast<Run>(dlsym(python, "PyRun_SimpleString"));
  const auto finalize = reinterpret_cast<Finalize>(dlsym(python, "Py_FinalizeEx"));
  if (!initialize || !run || !finalize) return 4;
  initialize();
  // runpy, as `python SCRIPT` runs it: its frames name the script's file.
  const std::string main = std::string("import runpy\nrunpy.run_path('") + argv[2] + "', run_name='__main__')\n";
  if (run(main.c_str()) != 0) return 5;
  if (finalize() != 0) return 6;
  if (dlclose(python) != 0) return 7;
  std::printf("unloaded mapped=%s\n", mapped(argv[1]) ? "yes" : "no");
  std::fflush(stdout);
  void* device = nullptr;
  char host[64] = {};
  CHECK(cudaMalloc(&device, sizeof host));
  for (int i = 0; i < 50; ++i) {
    CHECK(cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice));
    usleep(5000);
  }
  std::printf("survived\n");
  return 0;
}
