#pragma once
// `trainshim export DB --format kineto -o DIR`: a run as the traces torch.profiler (Kineto) writes,
// one file per rank, for the tools that read those (HTA, HolisticTraceAnalysis). What they hold and
// how HTA's figures differ from the report's: docs/formats.md, "The Kineto traces".
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "store/run_database.hpp"

namespace trainshim::cli {

// Hands each process's trace to `write` with its file's name: rank<R>.json, or pid<P>.json for a
// process no launcher numbered. Only the steps the report covers with the GPU timeline are in it,
// clipped to them, so that a tool's breakdown is over the same time as the report's. `step_name`
// as for `trainshim report`.
void for_each_kineto_trace(const RunDatabase& db, const std::string& step_name,
                           const std::function<void(const std::string& file, const nlohmann::ordered_json&)>& write);

}  // namespace trainshim::cli
