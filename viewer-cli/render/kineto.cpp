#include "render/kineto.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "analyse/kernels.hpp"
#include "diagnose/report_model.hpp"
#include "store/rows.hpp"

namespace trainshim::cli {

namespace {

using Json = nlohmann::ordered_json;

// Kineto's words for a copy: "Memcpy HtoD (Pageable -> Device)", what HTA's memory kernels start with.
std::string memcpy_name(Direction direction, HostMemory memory) {
  const char* kind = "Unknown";
  const char* from = "Device";
  const char* to = "Device";
  const char* host = memory == HostMemory::Pinned ? "Pinned" : memory == HostMemory::Pageable ? "Pageable" : "Host";
  switch (direction) {
    case Direction::HostToDevice:
      kind = "HtoD", from = host;
      break;
    case Direction::DeviceToHost:
      kind = "DtoH", to = host;
      break;
    case Direction::DeviceToDevice:
      kind = "DtoD";
      break;
    case Direction::HostToHost:
      kind = "HtoH", from = host, to = host;
      break;
    case Direction::Peer:
      kind = "PtoP";
      break;
    case Direction::None:
      break;
  }
  return fmt::format("Memcpy {} ({} -> {})", kind, from, to);
}

// The covered steps of a process as spans: consecutive ones joined.
std::vector<std::pair<int64_t, int64_t>> covered_spans(const ProcessReport& p) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  const std::vector<int64_t>& starts = p.sync_sites.steps.starts_ns;
  for (const CoveredStep& s : p.gpu.steps) {
    const auto k = std::size_t(s.step);
    if (k + 1 >= starts.size()) continue;
    if (!spans.empty() && spans.back().second == starts[k]) spans.back().second = starts[k + 1];
    else spans.emplace_back(starts[k], starts[k + 1]);
  }
  return spans;
}

Json kineto_trace(const RunDatabase& db, const ProcessReport& p) {
  const Vocabulary& names = db.vocabulary();
  const std::vector<std::pair<int64_t, int64_t>> spans = covered_spans(p);
  // Each span moved earlier by the time the timeline did not record before it, so that the spans
  // abut: a reader that spans the file from its first record to its last (HTA's breakdown) counts
  // only covered time, never the duty cycle's off time as idle.
  std::vector<int64_t> shifts(spans.size(), 0);
  for (std::size_t i = 1; i < spans.size(); ++i) shifts[i] = shifts[i - 1] + spans[i].first - spans[i - 1].second;
  Json events = Json::array();
  std::vector<int64_t> devices;
  auto span = spans.begin();
  for_each_gpu_activity(db, p.id, [&](const GpuActivityRow& row) {
    // Activities come by start: the spans before this one's start are behind.
    while (span != spans.end() && span->second <= row.start_ns) ++span;
    if (span == spans.end() || row.end_ns <= span->first) return;
    const int64_t shift = shifts[std::size_t(span - spans.begin())];
    const int64_t start = std::max(row.start_ns, span->first) - shift, end = std::min(row.end_ns, span->second) - shift;
    const std::optional<ApiClass> cls = names.api(row.api).api_class;
    std::string name, category;
    Json args{{"device", row.device}, {"stream", row.stream}, {"correlation", row.correlation}};
    if (cls == ApiClass::GpuKernel) {
      category = "kernel";
      name = row.name.empty() ? "(unnamed kernel)" : readable_kernel_name(row.name);
    } else if (cls == ApiClass::GpuCopy) {
      category = "gpu_memcpy";
      name = memcpy_name(row.direction, row.host_memory);
      args["bytes"] = row.bytes;
    } else if (cls == ApiClass::GpuSet) {
      category = "gpu_memset";
      name = "Memset (Device)";
      args["bytes"] = row.bytes;
    } else {
      return;
    }
    if (std::find(devices.begin(), devices.end(), row.device) == devices.end()) devices.push_back(row.device);
    events.push_back(Json{{"ph", "X"},
                          {"cat", std::move(category)},
                          {"name", std::move(name)},
                          {"pid", row.device},
                          {"tid", row.stream},
                          {"ts", double(start) / 1000.0},
                          {"dur", double(end - start) / 1000.0},
                          {"args", std::move(args)}});
  });
  std::sort(devices.begin(), devices.end());
  Json properties = Json::array();
  for (const int64_t d : devices) properties.push_back({{"id", d}, {"name", fmt::format("GPU {}", d)}});
  Json trace{{"schemaVersion", 1}, {"deviceProperties", std::move(properties)}};
  if (p.rank >= 0)
    trace["distributedInfo"] = {{"backend", "nccl"}, {"rank", p.rank}, {"world_size", std::max(p.world_size, 1)}};
  trace["trainshim"] = {{"pid", p.pid},
                        {"host", p.host},
                        {"covered_steps", p.gpu.covered_steps},
                        {"covered_ns", p.gpu.covered_ns},
                        {"not_recorded_ns", shifts.empty() ? 0 : shifts.back()},
                        {"note", "the GPU's records of the steps `trainshim report` covers with the GPU timeline, "
                                 "clipped to them, each stretch of covered steps moved earlier to follow the "
                                 "one before it (not_recorded_ns left out in all); trainshim records no kernel "
                                 "launches, so no runtime call or ProfilerStep annotation is written"}};
  trace["traceEvents"] = std::move(events);
  trace["displayTimeUnit"] = "ms";
  return trace;
}

}  // namespace

void for_each_kineto_trace(const RunDatabase& db, const std::string& step_name,
                           const std::function<void(const std::string& file, const Json&)>& write) {
  const Report report = read_report({&db}, step_name, 0);
  for (const ProcessReport& p : report.processes)
    write(p.rank >= 0 ? fmt::format("rank{}.json", p.rank) : fmt::format("pid{}.json", p.pid), kineto_trace(db, p));
}

}  // namespace trainshim::cli
