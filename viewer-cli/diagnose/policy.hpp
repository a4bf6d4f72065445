#pragma once
// An audit's policy: the limits a run is held to and the sync sites it may keep, read from TOML
// (docs/formats.md, "The policy").
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "analyse/syncs.hpp"

namespace trainshim::cli {

struct AllowedSite {
  std::string site;  // "file:line" (the end of the path) or a function name
  std::string reason;
};

// Limits; the defaults hold without a policy file (docs/formats.md, "The policy").
struct Policy {
  double hidden_syncs_per_step = 2.0;  // per rank, all hidden sync sites but allowed ones
  double blocked_share = 0.10;         // per rank: hidden syncs' bubbles / step (without steps: blocked / run)
  double pageable_bytes_per_step = 64.0 * (1 << 20);
  double wait_share = 0.25;                // per rank: waiting for other ranks / step (without steps: wait / run)
  double cause_share = 0.10;               // per root cause: its cost / the job's step
  int64_t dropped_events = 0;              // per rank
  double calls_per_step_tolerance = 0.10;  // baseline: a site may grow this much (and 0.05 calls)
  double wait_tolerance = 0.20;            // baseline: a rank's wait per step may grow this much (and 1 ms)
  std::vector<AllowedSite> allow;
  // The limits the policy file sets (by rule name): against a baseline, these are checked too.
  std::set<std::string> limits_set;
};

// Reads a TOML policy; throws UsageError saying what is wrong and where (file:line:column), an
// unknown key included.
Policy load_policy(const std::string& path);

// Whether the policy allows `site`: an entry "file:line" (the end of its path) or a function name.
bool allowed(const SyncSite& site, const Policy& policy);

}  // namespace trainshim::cli
