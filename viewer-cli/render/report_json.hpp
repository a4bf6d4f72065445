#pragma once
// The report as the trainshim-report/1 JSON document.
#include <nlohmann/json.hpp>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

nlohmann::ordered_json render_json(const Report& report);
// The report's `setup` array (`trainshim report --setup --json` prints it alone).
nlohmann::ordered_json setup_json(const std::vector<SetupItem>& setup);

}  // namespace trainshim::cli
