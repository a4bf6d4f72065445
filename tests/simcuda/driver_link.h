// How the simulated runtime reaches the simulated driver (driver_link.cpp, part of libcudart.so.13).
#pragma once

#include <cuda.h>

namespace simcuda {

// The driver functions the runtime calls, taken once from libcuda.so.1.
struct Driver {
  CUresult (*get_proc_address)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  CUresult (*driver_get_version)(int*);
  CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*memcpy_ptds)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*stream_synchronize_ptsz)(CUstream);
};

// Null when no libcuda.so.1 can be loaded: the runtime then does the work itself.
const Driver* driver();

}  // namespace simcuda
