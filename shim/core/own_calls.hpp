#pragma once
// The shim's own calls into the CUDA runtime, made on the program's threads (host-memory
// classification, timing events). They must leave the program exactly as it was:
// - the thread's last error: the program may have one pending that it has not read yet, and a
//   failing call would replace it. So nothing is called while one is pending; an error a call of
//   the shim causes is cleared before the hook returns;
// - stream capture: in the default global mode, a potentially unsafe call (an event query, a
//   pointer query, an allocation) made by any thread while another captures invalidates that
//   capture. The thread is switched to relaxed mode for the shim's calls and switched back, as
//   NCCL does around its own allocations (enqueue.cc) and vLLM around its buffers.
#include <cuda_runtime_api.h>

namespace trainshim::shim {

class OwnCalls {
 public:
  OwnCalls();
  ~OwnCalls();
  OwnCalls(const OwnCalls&) = delete;
  OwnCalls& operator=(const OwnCalls&) = delete;

  // False when the shim must call nothing: an error of the program is pending, or the runtime
  // lacks what the bracket needs.
  bool allowed() const { return allowed_; }

  // Passes a call's result through, remembering that it left an error to clear.
  cudaError_t check(cudaError_t result) {
    if (result != cudaSuccess && result != cudaErrorNotReady) failed_ = true;
    return result;
  }

  // Whether the stream (or, for the legacy stream, a blocking stream it encompasses) is being
  // captured; true also when the runtime cannot say.
  bool capturing(cudaStream_t stream);

 private:
  bool allowed_ = false;
  bool failed_ = false;
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

// The poller is the shim's own thread: relaxed once and for all, before its first query.
void relax_this_thread();

}  // namespace trainshim::shim
