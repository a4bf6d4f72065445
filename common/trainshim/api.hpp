#pragma once
// The interposed API as data: one enum value, name and class per entry of api.def.
#include <array>
#include <cstdint>
#include <string_view>

namespace trainshim {

enum class ApiClass : uint8_t {
  Copy,            // a cudaMemcpy*: direction, bytes and host-memory kind recorded
  Sync,            // the host waits for the device
  PinnedAlloc,     // page-locked host memory allocated by the runtime
  PinnedRegister,  // existing host memory page-locked
  PinnedFree,      // page-locked range released
  Collective,      // an NCCL collective
  CommInit,        // an NCCL communicator created
  CommEnd,         // an NCCL communicator destroyed
  Free,            // cudaFree: waits for the whole device before releasing the memory
  Poll,            // asks whether work is done without waiting (polling loops)
  GroupStart,      // ncclGroupStart: the collectives until the matching end are one operation
  GroupEnd,
  CollectiveTiming,  // not a call: a collective's GPU-side duration
  CommQuery,         // ncclCommGetAsyncError: not recorded; says when a non-blocking launch is done
};

enum class Library : uint8_t { Cudart, Nccl };

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

inline constexpr const ApiInfo& api_info(Api api) { return kApis[static_cast<std::size_t>(api)]; }

inline constexpr std::string_view api_class_name(ApiClass c) {
  switch (c) {
    case ApiClass::Copy: return "copy";
    case ApiClass::Sync: return "sync";
    case ApiClass::PinnedAlloc: return "pinned_alloc";
    case ApiClass::PinnedRegister: return "pinned_register";
    case ApiClass::PinnedFree: return "pinned_free";
    case ApiClass::Collective: return "collective";
    case ApiClass::CommInit: return "comm_init";
    case ApiClass::CommEnd: return "comm_end";
    case ApiClass::Free: return "free";
    case ApiClass::Poll: return "poll";
    case ApiClass::GroupStart: return "group_start";
    case ApiClass::GroupEnd: return "group_end";
    case ApiClass::CollectiveTiming: return "collective_timing";
    case ApiClass::CommQuery: return "comm_query";
  }
  return "unknown";
}

}  // namespace trainshim
