#pragma once
// The interposed API as data: one enum value, name and class per entry of api.def; the words of
// call_kinds.def; what a host sync is.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace trainshim {

// The classes, copy directions and host-memory kinds of call_kinds.def.
enum class ApiClass : uint8_t {
#define TS_API_CLASS(value, name) value,
#include "trainshim/call_kinds.def"
};
enum class Direction : uint8_t {
#define TS_DIRECTION(value, name) value,
#include "trainshim/call_kinds.def"
};
enum class HostMemory : uint8_t {
#define TS_HOST_MEMORY(value, name) value,
#include "trainshim/call_kinds.def"
};

// Their names, entry i naming value i: in the database's `apis.class`, `directions` and
// `host_memories`, and in the reports.
inline constexpr std::array kApiClassNames = {
#define TS_API_CLASS(value, name) std::string_view(name),
#include "trainshim/call_kinds.def"
};
inline constexpr std::array kDirectionNames = {
#define TS_DIRECTION(value, name) std::string_view(name),
#include "trainshim/call_kinds.def"
};
inline constexpr std::array kHostMemoryNames = {
#define TS_HOST_MEMORY(value, name) std::string_view(name),
#include "trainshim/call_kinds.def"
};
inline constexpr uint8_t kApiClassCount = uint8_t(ApiClass::Capture) + 1;
inline constexpr uint8_t kDirectionCount = uint8_t(Direction::Peer) + 1;
inline constexpr uint8_t kHostMemoryCount = uint8_t(HostMemory::Device) + 1;
static_assert(kApiClassNames.size() == kApiClassCount && kDirectionNames.size() == kDirectionCount &&
                  kHostMemoryNames.size() == kHostMemoryCount,
              "a name for every value, none more");

namespace detail {
template <class Enum, std::size_t N>
constexpr std::string_view name_in(const std::array<std::string_view, N>& names, Enum value) {
  return static_cast<std::size_t>(value) < N ? names[static_cast<std::size_t>(value)] : "invalid";
}
template <class Enum, std::size_t N>
constexpr std::optional<Enum> value_named(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<Enum>(i);
  return std::nullopt;
}
}  // namespace detail

// "invalid" for a value out of range (a record not validated).
inline constexpr std::string_view api_class_name(ApiClass c) { return detail::name_in(kApiClassNames, c); }
inline constexpr std::string_view direction_name(Direction d) { return detail::name_in(kDirectionNames, d); }
inline constexpr std::string_view host_memory_name(HostMemory m) { return detail::name_in(kHostMemoryNames, m); }
// nullopt for a name this build does not know.
inline constexpr std::optional<ApiClass> api_class_named(std::string_view name) {
  return detail::value_named<ApiClass>(kApiClassNames, name);
}
inline constexpr std::optional<Direction> direction_named(std::string_view name) {
  return detail::value_named<Direction>(kDirectionNames, name);
}
inline constexpr std::optional<HostMemory> host_memory_named(std::string_view name) {
  return detail::value_named<HostMemory>(kHostMemoryNames, name);
}

// Where the real function is: Cudart and Driver (libcuda.so.1) under the hook's own name, Nccl
// under "p" + name.
enum class Library : uint8_t { Cudart, Nccl, Driver };

// The interposed functions first, then the records the shim writes of its own (TS_RECORD).
enum class Api : uint16_t {
#define TS_API(name, api_class, library, ...) name,
#define TS_RECORD(name, api_class) name,
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
};

inline constexpr std::size_t kApiCount = 0
#define TS_API(...) +1
#define TS_RECORD(...) +1
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
    ;

struct ApiInfo {
  std::string_view name;
  ApiClass api_class;
  Library library;
};

inline constexpr std::array<ApiInfo, kApiCount> kApis = {{
#define TS_API(name, api_class, library, ...) {#name, ApiClass::api_class, Library::library},
#define TS_RECORD(name, api_class) {#name, ApiClass::api_class, Library::Nccl},
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
}};

// The classes of the GPU's own activity (CUPTI records), not of calls made by the host.
inline constexpr bool is_gpu_activity(ApiClass c) {
  return c == ApiClass::GpuKernel || c == ApiClass::GpuCopy || c == ApiClass::GpuSet;
}

inline constexpr const ApiInfo& api_info(Api api) { return kApis[static_cast<std::size_t>(api)]; }

// cudart names every asynchronous copy *Async (cudaMemcpyAsync, cudaMemcpy2DAsync_ptsz, ...).
inline constexpr bool is_synchronous_copy(ApiClass c, std::string_view api_name) {
  return c == ApiClass::Copy && api_name.find("Async") == std::string_view::npos;
}
inline constexpr bool is_synchronous_copy(Api api) {
  return is_synchronous_copy(api_info(api).api_class, api_info(api).name);
}

// What a host sync is: a call in which the host waits for the device. Every sync, and cudaFree
// (which waits for the whole device) unless it frees nothing (cudaFree(nullptr), PyTorch's way of
// creating the context). A copy: a synchronous one in every direction but device to device (CUDA's
// "API synchronization behavior"), an asynchronous one only into pageable memory or between host
// buffers. Polls ask and never wait.
inline constexpr bool is_host_sync(ApiClass c, Direction d, HostMemory m, bool synchronous_copy,
                                   bool null_object = false) {
  switch (c) {
    case ApiClass::Sync:
      return true;
    case ApiClass::Free:
      return !null_object;
    case ApiClass::Copy:
      if (d == Direction::HostToHost) return true;
      if (d != Direction::HostToDevice && d != Direction::DeviceToHost) return false;  // device-side, or not known
      return synchronous_copy || (d == Direction::DeviceToHost && m == HostMemory::Pageable);
    default:
      return false;
  }
}

// Whether a class's calls can be host syncs at all: the classes a reader of syncs looks at.
inline constexpr bool can_host_sync(ApiClass c) {
  return is_host_sync(c, Direction::HostToHost, HostMemory::Unknown, false);
}

// Events that carry the caller's native and Python stacks: every host sync, every collective, every
// capture's edges and every copy from or to pageable memory (a pageable site is reported by its line
// whether it waits or not). A thread's polls carry them only now and then (shim/call.hpp's
// kPollStackEvery).
inline constexpr bool captures_stacks(ApiClass c, Direction d, HostMemory m, bool synchronous_copy, bool null_object) {
  return c == ApiClass::Collective || c == ApiClass::Capture || (c == ApiClass::Copy && m == HostMemory::Pageable) ||
         is_host_sync(c, d, m, synchronous_copy, null_object);
}
}  // namespace trainshim
