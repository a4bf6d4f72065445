// Public extensions of the simulated CUDA runtime (tests/simcuda). Programs that run on the
// simulation use these to stand in for GPU kernels; the real libcudart has none of them.
#pragma once

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// A fake kernel: enqueues an operation that keeps the stream's worker busy for `microseconds`.
cudaError_t simcudaBusy(cudaStream_t stream, unsigned microseconds);

// Used by the simulated NCCL: runs fn(arg) on the stream's worker, in stream order. The host
// call returns at once; fn owns arg.
cudaError_t simcudaEnqueue(cudaStream_t stream, void (*fn)(void* arg), void* arg);

#ifdef __cplusplus
}
#endif
