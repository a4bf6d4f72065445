#pragma once
// The report's findings: what is wrong in a run (a hang, a straggler, pageable copies, hidden
// syncs, a GPU starved of input, lost records, stripped libraries, a GPU timeline that could not be
// taken), what it costs, and the advice for each.
#include <string>
#include <string_view>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// The remedy a GPU starved of pageable input ends with, after the loader's own: pinning. Where the
// pageable uploads are a root cause of their own, the input pipeline's cause leaves it to that one.
inline constexpr std::string_view kPinAfterLoadingRemedy =
    "then DataLoader(pin_memory=True) and batch.to(device, non_blocking=True), so that the upload overlaps compute";

// Fills report.findings from the rest of the report, costliest first.
void add_findings(Report& report);

// What to do about lost records, for each cause that lost some: only a full ring is helped by a
// larger one.
std::string loss_advice(const LostEvents& lost);

}  // namespace trainshim::cli
