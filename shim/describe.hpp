#pragma once
// The `describe` column of api.def: what each call is, taken from its arguments before the real
// function runs. Values the call produces (an allocated address, a new communicator) are read
// back from `result_object` after it returns successfully.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>

#include "core/communicators.hpp"
#include "core/host_memory.hpp"
#include "core/pinned_ranges.hpp"
#include "core/resolve.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim::describe {

inline constexpr int kNcclInProgress = ncclInProgress;

// The payload of the event's record (the EventRecord fields describe fills, meaning what
// protocol.hpp gives per class), kept apart from an EventRecord on purpose: Call::end copies it
// field by field, each load the size of the store describe made, so that the processor forwards
// it from its store queue. A draft holding an EventRecord, copied whole (wide loads over those
// narrower stores, which cannot be forwarded), measured 1 to 7 ns slower per call
// (scripts/bench/hook-overhead, paired rows).
struct Draft {
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint64_t object = 0;
  uint64_t detail = 0;
  uint32_t rank_in_comm = 0;
  uint32_t comm_size = 0;
  uint32_t sequence = 0;
  uint32_t peer = 0;
  uint32_t flags = 0;  // CollectiveFlag
  uint64_t comm = 0;   // collectives: the ncclComm_t handle
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  void* const* result_object = nullptr;  // where the call writes the object it creates
  int64_t argument = 0;                  // kept for `after` (the split colour); group ends: 1 for a simulated one
  // Bookkeeping once the real call returned successfully (pinned table, communicators), or, for
  // a communicator, returned ncclInProgress (non-blocking).
  void (*after)(Draft&) = nullptr;
};

inline uint64_t as_integer(const void* p) { return reinterpret_cast<uintptr_t>(p); }

inline Draft copy_linear(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  Draft d;
  d.bytes = bytes;
  d.stream = as_integer(stream);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      d.direction = Direction::HostToDevice;
      d.host_memory = classify_host_memory(src, bytes, stream);
      break;
    case cudaMemcpyDeviceToHost:
      d.direction = Direction::DeviceToHost;
      d.host_memory = classify_host_memory(dst, bytes, stream);
      break;
    case cudaMemcpyDeviceToDevice:
      d.direction = Direction::DeviceToDevice;
      d.host_memory = HostMemory::Device;
      break;
    case cudaMemcpyHostToHost:
      d.direction = Direction::HostToHost;
      d.host_memory = classify_host_memory(src, bytes, stream);
      break;
    case cudaMemcpyDefault: {
      // Unified addressing: the runtime infers the direction from the pointers, and so do we.
      const auto [from, to] = ask_runtime(src, dst, stream);
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

// cudaMemcpyToSymbol / FromSymbol: the symbol is always device memory, only the other side is
// classified. `to_symbol`: the copy writes the symbol.
inline Draft copy_symbol(const void* other, bool to_symbol, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  Draft d;
  d.bytes = bytes;
  d.stream = as_integer(stream);
  const Direction across = to_symbol ? Direction::HostToDevice : Direction::DeviceToHost;
  switch (kind) {
    case cudaMemcpyDeviceToDevice:
      d.direction = Direction::DeviceToDevice;
      d.host_memory = HostMemory::Device;
      break;
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost:
      if ((kind == cudaMemcpyHostToDevice) != to_symbol) break;  // rejected by the runtime
      d.direction = across;
      d.host_memory = classify_host_memory(other, bytes, stream);
      break;
    case cudaMemcpyDefault: {
      const HostMemory kind_of_other = ask_runtime(other, nullptr, stream).first;
      if (kind_of_other == HostMemory::Unknown) break;
      d.direction = kind_of_other == HostMemory::Device ? Direction::DeviceToDevice : across;
      d.host_memory = kind_of_other;
      break;
    }
    case cudaMemcpyHostToHost:
      break;
  }
  return d;
}

// cudaMemcpy3D(Async) between pointers: extent.width is in bytes ("If no CUDA array is
// participating in the copy then the extents are defined in elements of unsigned char"). With a
// CUDA array the extent counts the array's elements, whose size only the array knows: the bytes
// are not recorded, the array side is device memory.
inline const void* pitched_address(const cudaPitchedPtr& p, const cudaPos& pos) {
  return static_cast<const char*>(p.ptr) + (pos.z * p.ysize + pos.y) * p.pitch + pos.x;
}

inline Draft copy_3d(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  Draft unknown;
  unknown.stream = as_integer(stream);
  if (!p) return unknown;
  const bool arrays = p->srcArray || p->dstArray;
  if (arrays && p->kind == cudaMemcpyDefault) return unknown;
  const uint64_t bytes = arrays ? 0 : p->extent.width * p->extent.height * p->extent.depth;
  return copy_linear(const_cast<void*>(pitched_address(p->dstPtr, p->dstPos)), pitched_address(p->srcPtr, p->srcPos),
                     bytes, p->kind, stream);
}

// cudaMemcpyBatchAsync: one record for the batch, its bytes the sum of the sizes. The copies of a
// batch may go in different directions and the attributes carry only location hints, so the
// direction is not recorded.
inline Draft copy_batch(const size_t* sizes, size_t count, cudaStream_t stream) {
  Draft d;
  d.stream = as_integer(stream);
  for (size_t i = 0; sizes && i < count; ++i) d.bytes += sizes[i];
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

// A driver copy: the direction is the function's, `host` its host-side pointer (null device to
// device), classified as the runtime's copies are. CUstream and cudaStream_t are one type.
inline Draft driver_copy(Direction direction, const void* host, size_t bytes, CUstream stream) {
  Draft d;
  d.bytes = bytes;
  d.stream = as_integer(stream);
  d.direction = direction;
  d.host_memory = host ? classify_host_memory(host, bytes, stream) : HostMemory::Device;
  return d;
}

inline Draft driver_to_device(const void* src, size_t bytes, CUstream stream) {
  return driver_copy(Direction::HostToDevice, src, bytes, stream);
}
inline Draft driver_to_host(void* dst, size_t bytes, CUstream stream) {
  return driver_copy(Direction::DeviceToHost, dst, bytes, stream);
}
inline Draft driver_on_device(size_t bytes, CUstream stream) {
  return driver_copy(Direction::DeviceToDevice, nullptr, bytes, stream);
}

inline void* device_address(CUdeviceptr pointer) { return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer)); }

// cuMemcpy(Async): unified addressing, the pointers say the direction, as for cudaMemcpyDefault.
inline Draft driver_copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy_linear(device_address(dst), device_address(src), bytes, cudaMemcpyDefault, stream);
}

inline Draft on_stream(cudaStream_t stream) {
  Draft d;
  d.stream = as_integer(stream);
  return d;
}

// A launch: the kernel (its host stub or handle) or graph exec, and the stream.
inline Draft launch(const void* function, cudaStream_t stream) {
  Draft d;
  d.stream = as_integer(stream);
  d.object = as_integer(function);
  return d;
}

inline Draft on_object(const void* object) {
  Draft d;
  d.object = as_integer(object);
  return d;
}

inline Draft on_device_pointer(CUdeviceptr pointer) { return on_object(device_address(pointer)); }

inline Draft pinned_alloc(void** result, size_t size) {
  Draft d;
  d.bytes = size;
  d.result_object = result;
  d.after = [](Draft& done) {
    done.object = as_integer(*done.result_object);
    pinned_ranges().add(done.object, done.bytes);
  };
  return d;
}

inline Draft pinned_register(void* address, size_t size) {
  Draft d;
  d.bytes = size;
  d.object = as_integer(address);
  d.after = [](Draft& done) { pinned_ranges().add(done.object, done.bytes); };
  return d;
}

inline Draft pinned_free(void* address) {
  Draft d = on_object(address);
  d.after = [](Draft& done) { done.bytes = pinned_ranges().remove(done.object); };
  return d;
}

inline uint64_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 1;  // 8-bit float formats of newer NCCL versions
  }
}

// `op`: the reduction, 0 for collectives that have none.
inline Draft collective(size_t count, ncclDataType_t type, int op, ncclComm_t comm, cudaStream_t stream) {
  Draft d;
  const CommState state = comm_state(as_integer(comm));
  d.bytes = count * element_bytes(type);
  d.object = state.id;
  d.rank_in_comm = state.rank;
  d.comm_size = state.size;
  d.sequence = next_sequence(as_integer(comm));
  d.stream = as_integer(stream);
  d.comm = as_integer(comm);
  d.detail = collective_detail(uint32_t(op), uint64_t(type));
  return d;
}

// Point-to-point: numbered per (communicator, peer, direction), not among the collectives.
inline Draft point_to_point(bool send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  Draft d;
  const CommState state = comm_state(as_integer(comm));
  d.bytes = count * element_bytes(type);
  d.object = state.id;
  d.rank_in_comm = state.rank;
  d.comm_size = state.size;
  const bool valid_peer = peer >= 0 && (state.size == 0 || uint32_t(peer) < state.size);
  d.peer = valid_peer ? uint32_t(peer) : 0;
  d.sequence = valid_peer ? next_p2p_sequence(as_integer(comm), uint32_t(peer), send) : 0;
  d.flags = send ? kPointToPoint | kSend : uint32_t{kPointToPoint};
  d.stream = as_integer(stream);
  d.comm = as_integer(comm);
  d.detail = collective_detail(0, uint64_t(type));
  return d;
}

inline Draft set_device(int device) {
  Draft d;
  d.argument = device;
  return d;
}

inline Draft group() { return {}; }

// With a null simInfo NCCL ends the group for real (group.cc ncclGroupSimulateEnd).
inline Draft group_simulated(const ncclSimInfo_t* info) {
  Draft d;
  d.argument = info != nullptr;
  return d;
}

// FNV-1a over the unique id: the same 64-bit communicator id on every rank.
inline uint64_t unique_id_hash(const ncclUniqueId& id) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : id.internal) h = (h ^ uint8_t(c)) * 1099511628211ULL;
  return h;
}

inline void register_comm(Draft& done) {
  done.object = as_integer(*done.result_object);
  if (done.object) comm_created(done.object, {done.detail, done.comm_size, done.rank_in_comm});
}

inline Draft comm_init(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  Draft d;
  d.result_object = reinterpret_cast<void* const*>(comm);
  d.detail = unique_id_hash(id);
  d.rank_in_comm = uint32_t(rank);
  d.comm_size = uint32_t(nranks);
  d.after = register_comm;
  return d;
}

// PyTorch names a scalable communicator by its first root's id (NCCLComm::create_scalable,
// uniqueHash of commIds[0]); every rank is given the same list.
inline Draft comm_init_scalable(ncclComm_t* comm, int nranks, int rank, int nid, const ncclUniqueId* ids) {
  Draft d = comm_init(comm, nranks, nid > 0 && ids ? ids[0] : ncclUniqueId{}, rank);
  return d;
}

// One process drives every device: its communicators match nothing in other processes.
inline Draft comm_init_all(ncclComm_t* comms, int ndev) {
  Draft d;
  d.result_object = reinterpret_cast<void* const*>(comms);
  d.comm_size = uint32_t(ndev);
  d.after = [](Draft& done) {
    const auto* handles = reinterpret_cast<const ncclComm_t*>(done.result_object);
    for (uint32_t i = 0; i < done.comm_size; ++i) {
      const uint64_t handle = as_integer(handles[i]);
      comm_created(handle, {comm_state(handle).id, done.comm_size, i});
    }
    done.object = as_integer(handles[0]);
    done.detail = comm_state(done.object).id;
  };
  return d;
}

// A split or shrink child: its size and this rank in it are asked of NCCL's public API, which
// answers once the child is ready. A non-blocking child may not even have its handle written when
// the call returns (NCCL >= 2.23): then it is registered on its first collective.
inline void register_child(Draft& done) {
  const uint64_t handle = as_integer(*done.result_object);
  using Query = ncclResult_t (*)(const ncclComm_t, int*);
  auto count = reinterpret_cast<Query>(runtime_function(Library::Nccl, "pncclCommCount"));
  auto rank = reinterpret_cast<Query>(runtime_function(Library::Nccl, "pncclCommUserRank"));
  int size = 0, me = 0;
  auto* comm = reinterpret_cast<ncclComm_t>(handle);
  if (handle && count && rank && count(comm, &size) == ncclSuccess && rank(comm, &me) == ncclSuccess) {
    done.comm_size = uint32_t(size);
    done.rank_in_comm = uint32_t(me);
    register_comm(done);
    return;
  }
  done.object = 0;  // its size is not known yet: the record carries no communicator
  child_pending(done.result_object, done.detail);
}

inline Draft comm_split(ncclComm_t parent, int color, ncclComm_t* child) {
  Draft d;
  d.result_object = reinterpret_cast<void* const*>(child);
  d.detail = split_id(as_integer(parent), color);
  d.argument = color;
  d.after = [](Draft& done) {
    if (done.argument == NCCL_SPLIT_NOCOLOR) return;  // this rank is in no child
    register_child(done);
  };
  return d;
}

inline Draft comm_shrink(ncclComm_t parent, const int* excluded, int count, ncclComm_t* child) {
  Draft d;
  d.result_object = reinterpret_cast<void* const*>(child);
  d.detail = shrink_id(as_integer(parent), excluded, count);
  d.after = register_child;
  return d;
}

// ncclCommGetAsyncError: the state is read back once the real call returned.
inline Draft comm_query(ncclComm_t comm, const ncclResult_t* state) {
  Draft d;
  d.comm = as_integer(comm);
  d.result_object = reinterpret_cast<void* const*>(state);
  return d;
}

inline Draft comm_end(ncclComm_t comm) {
  Draft d = on_object(comm);
  d.after = [](Draft& done) { comm_destroyed(done.object); };
  return d;
}

}  // namespace trainshim::shim::describe
