#pragma once
// Numbers as a person reads them in a report.
#include <cstdint>
#include <string>

namespace trainshim::cli {

std::string with_thousands(int64_t n);   // 6200 -> "6,200"
std::string human_bytes(int64_t bytes);  // 1288490188 -> "1.2 GiB"
std::string human_duration(int64_t ns);  // 3410000000 -> "3.41 s"

}  // namespace trainshim::cli
