#pragma once
// The GPU's activity (CUPTI's kernel, memcpy and memset records) written into a run database as the
// collector stores it: each record through its ingest (rows of `gpu_activities`, counted in
// `calls`), each kernel name as the String side record the shim publishes (`python_strings`).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "database.hpp"
#include "run_fixtures.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::test {

struct GpuRow {
  Api api = Api::gpuKernel;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0;
  uint64_t stream = 0;
  uint64_t bytes = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  std::string name = {};  // kernels
  uint64_t correlation = 0;
};

// Kernel names get String ids from here up, clear of the ids a test gives its other strings.
inline constexpr uint32_t kFirstKernelNameId = 1u << 20;

// Adds `rows` of `process` to `records` (stored by records.store()), each name published once.
inline void add_gpu_rows(collector::Database& db, Records& records, int64_t process, const std::vector<GpuRow>& rows) {
  std::map<std::string, uint32_t> name_ids;
  for (const GpuRow& row : rows) {
    EventRecord r{};
    r.api = static_cast<uint16_t>(row.api);
    r.stream = row.stream;
    r.object = row.correlation;
    r.sequence = row.device;
    r.bytes = row.bytes;
    r.direction = static_cast<uint8_t>(row.direction);
    r.host_memory = static_cast<uint8_t>(row.host_memory);
    if (!row.name.empty()) {
      auto [it, fresh] = name_ids.try_emplace(row.name, kFirstKernelNameId + uint32_t(name_ids.size()));
      if (fresh) db.add_python_string(process, it->second, row.name);
      r.detail = it->second;
    }
    records.add(process, r, row.start_ns, row.end_ns);
  }
}

}  // namespace trainshim::test
