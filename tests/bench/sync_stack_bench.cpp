// The cost of a sync event with its stacks captured: called from Python (through ctypes, GIL
// released) at a chosen Python depth, it recurses to a chosen native depth and then times a loop
// of cudaStreamSynchronize, through the interposed symbol or straight into the runtime.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <ctime>

namespace {

using Sync = cudaError_t (*)(cudaStream_t);
const auto g_stream = reinterpret_cast<cudaStream_t>(0x1234);

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Each level stays a real frame: the result depends on the call below (no tail call).
__attribute__((noinline)) int64_t descend(int levels, int iterations, Sync sync) {
  if (levels > 0) return descend(levels - 1, iterations, sync) + 0 * levels;
  const int64_t start = now_ns();
  for (int i = 0; i < iterations; ++i) sync(g_stream);
  return now_ns() - start;
}

}  // namespace

// Total nanoseconds for `iterations` syncs made `native_depth` frames below this call.
extern "C" __attribute__((visibility("default"))) int64_t bench_syncs(int native_depth, int iterations, int hooked) {
  static const Sync direct =
      reinterpret_cast<Sync>(dlsym(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD), "cudaStreamSynchronize"));
  return descend(native_depth, iterations, hooked ? &cudaStreamSynchronize : direct);
}
