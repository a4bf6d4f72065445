#pragma once
// What kind of memory a copy's host-side pointer is: pinned, pageable or in fact device memory.
#include <cstdint>

#include "trainshim/protocol.hpp"

namespace trainshim::shim {

// The pinned table first; then this thread's remembered answers; then, once per range, the
// runtime's own answer (cudaPointerGetAttributes), remembered for [address, address + bytes).
HostMemory classify_host_memory(const void* address, uint64_t bytes);

// The runtime's answer alone, for a pointer whose side of the copy is not known
// (cudaMemcpyDefault). Unknown when the runtime cannot tell (no driver).
HostMemory ask_runtime(const void* address);

}  // namespace trainshim::shim
