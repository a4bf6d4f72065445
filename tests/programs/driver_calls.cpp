// driver_calls MODE [STEPS]: a training loop on the CUDA driver API alone, its functions taken
//   direct  by name, as a program linked against libcuda calls them (Numba's ctypes binding too)
//   proc    through cuGetProcAddress (cuda-python's, JAX/XLA's and Triton's way), per-thread twins
//           of the syncs with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
//   entry   through the runtime's cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion
//   bootproc, bootentry
//           as proc, through a cuGetProcAddress that was itself taken through cuGetProcAddress
//           or cudaGetDriverEntryPoint (a loader that resolves everything from one bootstrap)
// Each step makes the same calls at the same lines whatever the mode (markers DRIVER_*).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../simcuda/driver_api.h"
#include "check.hpp"

namespace {

struct DriverApi {
  decltype(&cuMemcpyHtoD_v2) htod = nullptr;
  decltype(&cuMemcpyDtoH_v2) dtoh = nullptr;
  decltype(&cuMemcpyDtoD_v2) dtod = nullptr;
  decltype(&cuMemcpyHtoDAsync_v2) htod_async = nullptr;
  decltype(&cuMemcpyDtoHAsync_v2) dtoh_async = nullptr;
  decltype(&cuMemcpy) unified = nullptr;
  decltype(&cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&cuStreamQuery) stream_query = nullptr;
  decltype(&cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuStreamSynchronize) per_thread_synchronize = nullptr;  // proc mode only
};

// The cuGetProcAddress the lookups go through: the one called by name, or a bootstrapped one.
decltype(&cuGetProcAddress_v2) g_get_proc_address = &cuGetProcAddress_v2;

template <class F>
void from_proc_address(F& slot, const char* name, cuuint64_t flags) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  CHECK(g_get_proc_address(name, &p, CUDA_VERSION, flags, &status));
  if (status != CU_GET_PROC_ADDRESS_SUCCESS || !p) std::exit(2);
  slot = reinterpret_cast<F>(p);
}

// cudaGetDriverEntryPoint is deprecated in CUDA 13 and still what code written for CUDA 11 and 12 calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
template <class F>
void from_entry_point(F& slot, const char* name, bool by_version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CHECK(by_version ? cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &status)
                   : cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || !p) std::exit(2);
  slot = reinterpret_cast<F>(p);
}
#pragma GCC diagnostic pop

void bootstrap_proc_address(const std::string& mode) {
  if (mode == "bootproc") from_proc_address(g_get_proc_address, "cuGetProcAddress", CU_GET_PROC_ADDRESS_DEFAULT);
  else from_entry_point(g_get_proc_address, "cuGetProcAddress", false);
}

DriverApi by_name() {
  DriverApi api;
  api.htod = &cuMemcpyHtoD_v2;
  api.dtoh = &cuMemcpyDtoH_v2;
  api.dtod = &cuMemcpyDtoD_v2;
  api.htod_async = &cuMemcpyHtoDAsync_v2;
  api.dtoh_async = &cuMemcpyDtoHAsync_v2;
  api.unified = &cuMemcpy;
  api.stream_synchronize = &cuStreamSynchronize;
  api.stream_query = &cuStreamQuery;
  api.ctx_synchronize = &cuCtxSynchronize;
  api.free = &cuMemFree_v2;
  return api;
}

DriverApi by_proc_address() {
  DriverApi api;
  const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  from_proc_address(api.htod, "cuMemcpyHtoD", legacy);
  from_proc_address(api.dtoh, "cuMemcpyDtoH", legacy);
  from_proc_address(api.dtod, "cuMemcpyDtoD", legacy);
  from_proc_address(api.htod_async, "cuMemcpyHtoDAsync", legacy);
  from_proc_address(api.dtoh_async, "cuMemcpyDtoHAsync", legacy);
  from_proc_address(api.unified, "cuMemcpy", legacy);
  from_proc_address(api.stream_synchronize, "cuStreamSynchronize", legacy);
  from_proc_address(api.stream_query, "cuStreamQuery", legacy);
  from_proc_address(api.free, "cuMemFree", legacy);
  from_proc_address(api.per_thread_synchronize, "cuStreamSynchronize", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  // CUDA 11.3's cuGetProcAddress, and cuCtxSynchronize as CUDA 12 knew it (CUDA 13's takes a context).
  void* p = nullptr;
  CHECK(cuGetProcAddress("cuCtxSynchronize", &p, 12000, legacy));
  api.ctx_synchronize = reinterpret_cast<decltype(api.ctx_synchronize)>(p);
  return api;
}

DriverApi by_entry_point() {
  DriverApi api;
  from_entry_point(api.htod, "cuMemcpyHtoD", false);
  from_entry_point(api.dtoh, "cuMemcpyDtoH", true);
  from_entry_point(api.dtod, "cuMemcpyDtoD", false);
  from_entry_point(api.htod_async, "cuMemcpyHtoDAsync", true);
  from_entry_point(api.dtoh_async, "cuMemcpyDtoHAsync", false);
  from_entry_point(api.unified, "cuMemcpy", true);
  from_entry_point(api.stream_synchronize, "cuStreamSynchronize", false);
  from_entry_point(api.stream_query, "cuStreamQuery", true);
  from_entry_point(api.free, "cuMemFree", false);
  void* p = nullptr;
  CHECK(cudaGetDriverEntryPointByVersion("cuCtxSynchronize", &p, 12000, cudaEnableDefault, nullptr));
  api.ctx_synchronize = reinterpret_cast<decltype(api.ctx_synchronize)>(p);
  return api;
}

__attribute__((noinline)) void train(const DriverApi& api, int steps) {
  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr weights = 0, scratch = 0;
  CHECK(cuMemAlloc_v2(&weights, 4096));
  CHECK(cuMemAlloc_v2(&scratch, 4096));
  void* pinned = nullptr;
  CHECK(cuMemAllocHost_v2(&pinned, 4096));
  std::vector<char> registered(4096), pageable(4096);
  CHECK(cuMemHostRegister_v2(registered.data(), registered.size(), 0));
  for (int step = 0; step < steps; ++step) {
    CHECK(api.htod(weights, pageable.data(), 1000));  // DRIVER_H2D_PAGEABLE
    CHECK(api.htod_async(scratch, pinned, 2000, stream));
    CHECK(api.dtoh_async(pageable.data(), weights, 300, stream));  // DRIVER_D2H_PAGEABLE
    CHECK(api.stream_synchronize(stream));                         // DRIVER_STREAM_SYNC
    CHECK(api.dtoh(pinned, scratch, 400));
    const CUresult state = api.stream_query(stream);
    if (state != CUDA_SUCCESS && state != CUDA_ERROR_NOT_READY) std::exit(3);
    CHECK(api.dtod(scratch, weights, 500));
    CHECK(api.unified(weights, reinterpret_cast<CUdeviceptr>(registered.data()), 600));
    CHECK(api.ctx_synchronize());                                                // DRIVER_CTX_SYNC
    if (api.per_thread_synchronize) CHECK(api.per_thread_synchronize(nullptr));  // DRIVER_PTSZ_SYNC
  }
  CHECK(cuMemHostUnregister(registered.data()));
  CHECK(cuMemFreeHost(pinned));
  CHECK(api.free(scratch));  // DRIVER_FREE
  CHECK(cuMemFree_v2(weights));
  CHECK(cuStreamDestroy_v2(stream));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "direct";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 4;
  CHECK(cuInit(0));
  int version = 0;
  CHECK(cuDriverGetVersion(&version));
  if (mode == "bootproc" || mode == "bootentry") bootstrap_proc_address(mode);
  const bool proc = mode == "proc" || mode == "bootproc" || mode == "bootentry";
  const DriverApi api = proc ? by_proc_address() : mode == "entry" ? by_entry_point() : by_name();
  train(api, steps);
  std::printf("%s: %d steps on driver %d\n", mode.c_str(), steps, version);
  return 0;
}
