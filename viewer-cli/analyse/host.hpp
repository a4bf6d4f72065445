#pragma once
// What the shim's sampler saw of each rank's host (`samples`, `process_facts`): the time its main
// thread waited for the DataLoader, what the straggler was doing while the others waited for it,
// and the setup facts the checklist (setup.hpp) reads.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analyse/collectives.hpp"
#include "analyse/steps.hpp"
#include "store/counters.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

// The main thread's samples inside `torch/utils/data/dataloader.py`'s `__next__`: the steps it
// kept waiting for its next batch.
struct InputWait {
  int64_t samples = 0;        // main-thread samples inside the covered steps (the whole run when no steps)
  int64_t wait_samples = 0;   // of those, inside the DataLoader iterator's __next__
  int64_t queue_samples = 0;  // of those, inside _try_get_data: waiting for the workers' queue
  int64_t steps = 0;          // steps covered; 0: no steps found, the shares are of the run
  int64_t step_ns = 0;        // their mean length
  std::string site;           // "file:line in function" that called next() most often; empty: not known

  double share() const { return samples ? double(wait_samples) / double(samples) : 0; }
  double queue_share() const { return wait_samples ? double(queue_samples) / double(wait_samples) : 0; }
  // Null when no steps were found.
  std::optional<int64_t> ns_per_step() const {
    return steps ? std::optional<int64_t>(int64_t(share() * double(step_ns))) : std::nullopt;
  }
};

struct HostReport {
  std::string sampler;  // processes.sampler: "on", "off", "failed"; empty: not started
  int64_t sample_hz = 0;
  int64_t samples = 0;  // rows of `samples`
  SamplerCounters counters;
  std::optional<InputWait> input_wait;       // none without main-thread samples
  std::map<std::string, std::string> facts;  // process_facts
};

// The rest of a process's HostReport (sampler, sample_hz and counters are read with its row).
// `pid` names its main thread; `steps` are the steps its syncs or collectives marked.
void load_host(const RunDatabase& db, int64_t process_id, int64_t pid, const Steps& steps, HostReport& host);

// What the straggler's main thread was doing in the windows where the other ranks waited for it:
// its innermost user frame (Python) most often seen, with the state and system call most often
// seen there; for a program without Python frames, its most frequent state and system call.
struct StragglerDoing {
  int rank = -1;
  std::string thread = "main";
  std::string function, file;
  int line = 0;
  double share = 0;   // of `samples`: those at that frame (or, without one, in that state and call)
  std::string state;  // the state's letter, as stored
  int64_t syscall = -1;
  int64_t samples = 0;  // the main thread's samples in the late windows
};

// The windows are [host_begin_ns - lateness_ns, host_begin_ns] of each late collective; none when
// the main thread has no sample in them.
std::optional<StragglerDoing> load_straggler_doing(const RunDatabase& db, int64_t process_id, int64_t pid, int rank,
                                                   const std::vector<LateCollective>& late);

// "in load_batch at data.py:88 (92 % of samples), sleeping in clock_nanosleep", or without Python
// "sleeping in clock_nanosleep (100 % of samples)".
std::string straggler_doing_words(const StragglerDoing& doing);

}  // namespace trainshim::cli
