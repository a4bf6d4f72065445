#pragma once
// The report's kinds of finding (finding_kinds.def), apart from the report's model: a root cause
// that is one finding alone carries its kind.
#include <string>

#include "diagnose/setup.hpp"

namespace trainshim::cli {

enum class FindingKind {
#define TS_FINDING(value, name) value,
#include "diagnose/finding_kinds.def"
#undef TS_FINDING
};

// The kind's name in JSON: "hang", ..., and setup_<item> for a Setup finding.
std::string finding_kind_name(FindingKind kind, SetupItemKind setup_item);

}  // namespace trainshim::cli
