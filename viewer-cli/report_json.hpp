#pragma once
// The report as the trainshim-report/1 JSON document.
#include <nlohmann/json.hpp>

#include "report_model.hpp"

namespace trainshim::cli {

nlohmann::ordered_json render_json(const Report& report);

}  // namespace trainshim::cli
