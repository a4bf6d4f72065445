// How the simulated runtime tells the simulated CUPTI what the streams did. The real CUPTI hooks
// the driver: it instruments each launch while an activity kind is enabled and reads the GPU's
// start/end timestamps once the work ran. Here libcudart.so.13 plays the driver's part: at each
// launching call it asks the sink whether the kind is enabled, and the stream's worker reports
// the operation with its start and end once it ran. Without libcupti no sink is set and nothing
// is reported. Internal to tests/simcuda: no program sees these declarations.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// KERNEL, MEMCPY and MEMSET are what a stream ran; API is a runtime call itself (CUPTI's RUNTIME,
// EXTERNAL_CORRELATION and SYNCHRONIZATION records come from it).
enum simcudaActivityKind {
  SIMCUDA_ACTIVITY_KERNEL,
  SIMCUDA_ACTIVITY_MEMCPY,
  SIMCUDA_ACTIVITY_MEMSET,
  SIMCUDA_ACTIVITY_API
};

// Where a copy's or memset's bytes live, from the memory registry at the call.
enum simcudaMemoryKind { SIMCUDA_MEMORY_PAGEABLE, SIMCUDA_MEMORY_PINNED, SIMCUDA_MEMORY_DEVICE };

struct simcudaActivity {
  simcudaActivityKind kind;
  std::uint64_t start_ns;  // CLOCK_MONOTONIC when the worker began the operation
  std::uint64_t end_ns;    // ... and when it finished
  std::uint32_t device;
  std::uint32_t stream_id;         // the stream's id (what cuptiGetStreamIdEx answers)
  std::uint32_t correlation;       // of the runtime call that launched it; a graph's nodes share the cudaGraphLaunch's
  std::uint64_t launching_thread;  // an id of the host thread that launched it (CUPTI keeps a buffer per thread)
  // Kernels
  const char* name;  // the device (mangled) name; valid only during the report
  dim3 grid;
  dim3 block;
  std::size_t dynamic_shared_bytes;
  bool cooperative;
  // Copies (bytes of every row) and memsets
  std::uint64_t bytes;
  simcudaMemoryKind src;     // copies
  simcudaMemoryKind dst;     // copies; a memset's memory
  std::uint64_t copy_count;  // copies in a cudaMemcpyBatchAsync record, else 1
  std::uint32_t value;       // memsets
  bool async;                // a copy or memset by an ...Async call
};

// What a synchronising runtime call waited for (CUpti_ActivitySynchronizationType's values).
enum simcudaSyncKind {
  SIMCUDA_SYNC_NONE = 0,
  SIMCUDA_SYNC_EVENT = 1,              // cudaEventSynchronize
  SIMCUDA_SYNC_STREAM_WAIT_EVENT = 2,  // cudaStreamWaitEvent
  SIMCUDA_SYNC_STREAM = 3,             // cudaStreamSynchronize
  SIMCUDA_SYNC_DEVICE = 4,             // cudaDeviceSynchronize (CUPTI's context synchronisation)
};

// A runtime call as CUPTI's API record (CUpti_ActivityAPI) describes it, reported on the calling
// thread when the call begins (its correlation and thread only) and when it returns. Only the
// outermost call of a thread is reported: a runtime function that calls another is one call.
struct simcudaApiCall {
  std::uint32_t cbid;         // CUPTI_RUNTIME_TRACE_CBID_*
  std::uint64_t start_ns;     // CLOCK_MONOTONIC at the call
  std::uint64_t end_ns;       // ... and at its return
  std::uint32_t correlation;  // shared with the kernels, copies and memsets the call launched
  std::uint32_t result;       // its cudaError_t
  simcudaSyncKind sync;
  std::uint32_t device;          // of a synchronisation: the stream's, the event's or the current device
  std::uint32_t stream_id;       // of a stream synchronisation or stream wait, else UINT32_MAX
  std::uint32_t event_id;        // of an event synchronisation or stream wait, else UINT32_MAX
  std::uint64_t calling_thread;  // the same id as simcudaActivity's launching_thread
};

struct simcudaActivitySink {
  // On the launching thread, at the call (or at each graph launch): whether to report this kind.
  bool (*enabled)(simcudaActivityKind kind);
  // On the stream's worker, once the operation ran.
  void (*completed)(const simcudaActivity* activity);
  // On the calling thread, when a runtime call begins, before it launches anything, if
  // enabled(SIMCUDA_ACTIVITY_API); and when it returns.
  void (*api_entered)(const simcudaApiCall* call);
  void (*api_returned)(const simcudaApiCall* call);
};

// Installs the sink (null removes it). The sink must stay valid while installed.
void simcudaSetActivitySink(const simcudaActivitySink* sink);

// The id a stream's activity records carry; cudaErrorInvalidResourceHandle for an unknown handle.
cudaError_t simcudaGetStreamId(cudaStream_t stream, std::uint32_t* id);

}  // extern "C"
