#pragma once
// The `describe` column of api.def: what each call is, taken from its arguments before the real
// function runs. Values the call produces (an allocated address, a new communicator) are read
// back from `result_object` after it returns successfully.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>

#include "core/host_memory.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim::describe {

struct Draft {
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint64_t object = 0;
  uint64_t detail = 0;
  uint32_t rank_in_comm = 0;
  uint32_t comm_size = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  void* const* result_object = nullptr;  // where the call writes the object it creates
};

inline uint64_t as_integer(const void* p) { return reinterpret_cast<uintptr_t>(p); }

inline Draft copy_linear(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  Draft d;
  d.bytes = bytes;
  d.stream = as_integer(stream);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      d.direction = Direction::HostToDevice;
      d.host_memory = classify_host_memory(src, bytes);
      break;
    case cudaMemcpyDeviceToHost:
      d.direction = Direction::DeviceToHost;
      d.host_memory = classify_host_memory(dst, bytes);
      break;
    case cudaMemcpyDeviceToDevice:
      d.direction = Direction::DeviceToDevice;
      d.host_memory = HostMemory::Device;
      break;
    case cudaMemcpyHostToHost:
      d.direction = Direction::HostToHost;
      d.host_memory = classify_host_memory(src, bytes);
      break;
    case cudaMemcpyDefault: {
      // Unified addressing: the runtime infers the direction from the pointers, and so do we.
      const HostMemory from = ask_runtime(src), to = ask_runtime(dst);
      const bool from_device = from == HostMemory::Device, to_device = to == HostMemory::Device;
      if (from == HostMemory::Unknown || to == HostMemory::Unknown) break;
      d.direction = from_device ? (to_device ? Direction::DeviceToDevice : Direction::DeviceToHost)
                                : (to_device ? Direction::HostToDevice : Direction::HostToHost);
      d.host_memory = from_device ? to : from;
      break;
    }
  }
  return d;
}

inline Draft copy_peer(size_t bytes, cudaStream_t stream) {
  Draft d;
  d.bytes = bytes;
  d.stream = as_integer(stream);
  d.direction = Direction::Peer;
  d.host_memory = HostMemory::Device;
  return d;
}

inline Draft on_stream(cudaStream_t stream) {
  Draft d;
  d.stream = as_integer(stream);
  return d;
}

inline Draft on_object(const void* object) {
  Draft d;
  d.object = as_integer(object);
  return d;
}

inline Draft pinned_alloc(void** result, size_t size) {
  Draft d;
  d.bytes = size;
  d.result_object = result;
  return d;
}

inline Draft pinned_register(void* address, size_t size) {
  Draft d;
  d.bytes = size;
  d.object = as_integer(address);
  return d;
}

inline Draft pinned_free(void* address) { return on_object(address); }

inline uint64_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 1;  // 8-bit float formats of newer NCCL versions
  }
}

inline Draft collective(size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Draft d;
  d.bytes = count * element_bytes(type);
  d.object = as_integer(comm);
  d.stream = as_integer(stream);
  d.detail = (uint64_t(op) << 8) | uint64_t(type);
  return d;
}

// FNV-1a over the unique id: the same 64-bit communicator id on every rank.
inline uint64_t unique_id_hash(const ncclUniqueId& id) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : id.internal) h = (h ^ uint8_t(c)) * 1099511628211ULL;
  return h;
}

inline Draft comm_init(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  Draft d;
  d.result_object = reinterpret_cast<void* const*>(comm);
  d.detail = unique_id_hash(id);
  d.rank_in_comm = uint32_t(rank);
  d.comm_size = uint32_t(nranks);
  return d;
}

inline Draft comm_end(ncclComm_t comm) { return on_object(comm); }

}  // namespace trainshim::shim::describe
