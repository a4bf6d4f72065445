// Mirrors c10/cuda/CUDAFunctions.cpp.
#include "torchlike/c10_cuda.h"

namespace c10::cuda {

// Mirrors device_synchronize (torch.cuda.synchronize() ends here).
TORCHLIKE_FRAME void device_synchronize() { C10_CUDA_CHECK(cudaDeviceSynchronize()); }

// Mirrors set_device / c10::cuda::SetDevice: cudaSetDevice for the calling thread.
void set_device(int device) { C10_CUDA_CHECK(cudaSetDevice(device)); }

// Mirrors current_device.
int current_device() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace c10::cuda
