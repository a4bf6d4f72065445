#pragma once
// Every host/GPU synchronisation of a rank, classified and grouped by the user's source line.
#include <cstdint>
#include <string>
#include <vector>

#include "classifier.hpp"
#include "run_database.hpp"
#include "steps.hpp"

namespace trainshim::cli {

// What a site is, whichever list of RankSyncs holds it.
enum class SiteKind { HiddenSync, ExplicitSync, PageableCopy, Poll };

struct SyncSite {
  SiteKind kind = SiteKind::HiddenSync;
  Direction copy_direction = Direction::None;  // PageableCopy: the copies' direction
  Classification classification;
  std::string file, function, source;  // the user's frame (Python, else the program's native frame)
  int line = 0;
  bool in_backward = false;  // the Python stack is the one of the thread blocked in backward (autograd thread)
  std::vector<PythonFrameView> python;  // innermost first
  std::vector<NativeFrameView> native;  // innermost first
  int64_t calls = 0;                    // operations: the waits, not counting a blocking copy the wait follows
  int64_t blocked_ns = 0;               // host time in every call of the site
  int64_t bytes = 0;                    // pageable copy sites: bytes copied
};

// What names a site from one run to the next (diff, audit baselines): the operation, the file, the
// function and the text of the line (trimmed), never its number: an unrelated edit above it must
// not make it new.
std::string site_identity(const SyncSite& site);

struct RankSyncs {
  Steps steps;
  int64_t span_ns = 0;
  std::vector<SyncSite> hidden;           // by blocked time, largest first
  std::vector<SyncSite> explicit_;        // idem
  std::vector<SyncSite> pageable_copies;  // copies from or to pageable memory, by the user's line
  std::vector<SyncSite> polls;            // cudaStreamQuery loops: not waits, reported with their rate
};

// The classes of calls the sync readers select, by what is_host_sync makes of them.
// Sync, free: host syncs whatever their arguments (cudaFree(nullptr) aside).
bool waits_by_class(ApiClass c);
// And polls: the report's rows per API.
bool waits_or_polls(ApiClass c);
// And copies: every class a sync, poll or pageable-copy site can come from.
bool may_wait_or_poll(ApiClass c);

// A stored stack's frames, innermost first (empty for stack id 0 or an unknown id).
std::vector<NativeFrameView> load_native_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id);
std::vector<PythonFrameView> load_python_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id);
// Whether a stored Python stack was borrowed by an autograd engine thread from the thread blocked in
// backward.
bool python_stack_borrowed(const RunDatabase& db, int64_t process_id, int64_t stack_id);

// collectives: the process's collective calls in time order (load_collective_calls), for the steps.
RankSyncs load_syncs(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                     std::vector<CollectiveCall> collectives);

}  // namespace trainshim::cli
