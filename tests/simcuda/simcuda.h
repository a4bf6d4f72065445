// Public extensions of the simulated CUDA runtime (tests/simcuda). Programs that run on the
// simulation use these to stand in for GPU kernels; the real libcudart has none of them.
#pragma once

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// A fake kernel: enqueues an operation that keeps the stream's worker busy for `microseconds`.
// It is a kernel named "simcudaBusyKernel" in the activity records.
cudaError_t simcudaBusy(cudaStream_t stream, unsigned microseconds);

// Kernels are registered as nvcc's generated code registers them (__cudaRegisterFatBinary,
// __cudaRegisterFunction, ...) and launched by cudaLaunchKernel and its variants; each runs on its
// stream's worker for its duration (0 until set). A launch takes the duration set at the call
// (for a captured launch, at the capture). func is the kernel's host stub or its cudaKernel_t;
// cudaErrorInvalidDeviceFunction if it is not registered.
cudaError_t simcudaSetKernelDuration(const void* func, unsigned long long ns);

// Registers a kernel with this device (mangled) name and duration, the way a module's
// registration code does, and returns the address that stands for its host stub: what
// cudaLaunchKernel takes as func. For programs without nvcc-generated code (Python via ctypes).
cudaError_t simcudaRegisterKernel(const char* deviceName, unsigned long long ns, const void** hostFun);

// Runs fn(arg) on the stream's worker, in stream order, as host work the GPU waits for (its clock
// is at least the wall clock's after it). The host call returns at once; fn owns arg.
cudaError_t simcudaEnqueue(cudaStream_t stream, void (*fn)(void* arg), void* arg);

// The same, run as a kernel with this device (mangled) name: the simulated NCCL's collectives,
// which the real NCCL launches as kernels through the driver (so no runtime launch call sees them).
// Its time on the GPU is what fn says with simcudaRunFor and simcudaCaughtUp.
cudaError_t simcudaEnqueueKernel(cudaStream_t stream, const char* deviceName, void (*fn)(void* arg), void* arg);

// For an operation run by simcudaEnqueue or simcudaEnqueueKernel, the simulated GPU's clock (a
// GPU's time is its own: work runs back to back whatever the host's CPUs do). simcudaRunFor: a
// kernel's run of `ns`. simcudaCaughtUp: after a wait on something outside the GPU (a peer rank),
// its time is at least the wall clock's.
void simcudaRunFor(unsigned long long ns);
void simcudaCaughtUp(void);

#ifdef __cplusplus
}
#endif
