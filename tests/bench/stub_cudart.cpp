// A libcudart.so.13 whose functions return at once: the benchmark's un-hooked baseline costs a
// call and nothing else, so the difference to the hooked call is the shim's own cost.
#include <cuda_runtime_api.h>

extern "C" {
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void*) {
  attributes->type = cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
// What the shim's own calls need around them: the capture mode it relaxes, the device whose
// event pool serves a stream.
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode*) { return cudaSuccess; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamGetDevice(cudaStream_t, int* device) {
  *device = 0;
  return cudaSuccess;
}

// Timing events for collectives: created, recorded and complete at once.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  static char events[1 << 16];
  static unsigned next = 0;
  *event = reinterpret_cast<cudaEvent_t>(&events[next++ % sizeof events]);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.5f;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
}
