#pragma once
// What kind of memory a copy's host-side pointer is: pinned, pageable or in fact device memory.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "trainshim/protocol.hpp"

namespace trainshim::shim {

// The pinned table first; then this thread's remembered answers; then, once per range, the
// runtime's own answer (cudaPointerGetAttributes), remembered for [address, address + bytes).
// The runtime is not asked while the copy's stream is being captured: the copy is captured, not
// run, and the answer is Unknown.
HostMemory classify_host_memory(const void* address, uint64_t bytes, cudaStream_t stream);

// The runtime's answer alone, for pointers whose side of the copy is not known
// (cudaMemcpyDefault); Unknown when the runtime cannot tell (no driver) or is not asked (capture).
struct RuntimeAnswer {
  HostMemory first = HostMemory::Unknown;
  HostMemory second = HostMemory::Unknown;
};
RuntimeAnswer ask_runtime(const void* first, const void* second, cudaStream_t stream);

}  // namespace trainshim::shim
