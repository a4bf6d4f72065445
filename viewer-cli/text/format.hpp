#pragma once
// Numbers and ranks as a person reads them in a report.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace trainshim::cli {

// "3", or "?" for a process no launcher numbered (rank -1).
std::string rank_label(int rank);
// The rank, or null for a process no launcher numbered.
nlohmann::ordered_json rank_json(int rank);
// "rank 3", or "process 1234" for a process no launcher numbered.
std::string rank_words(int rank, int64_t pid);

std::string with_thousands(int64_t n);   // 6200 -> "6,200"
std::string human_bytes(int64_t bytes);  // 1288490188 -> "1.2 GiB"
std::string human_duration(int64_t ns);  // 3410000000 -> "3.41 s"

}  // namespace trainshim::cli
