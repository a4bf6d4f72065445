// Mirrors c10/cuda/CUDAFunctions.cpp.
#include "torchlike/c10_cuda.h"

namespace c10::cuda {

// Mirrors device_synchronize (torch.cuda.synchronize() ends here).
TORCHLIKE_FRAME void device_synchronize() { C10_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace c10::cuda
