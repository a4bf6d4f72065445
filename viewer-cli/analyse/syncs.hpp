#pragma once
// Every host/GPU synchronisation of a rank, classified and grouped by the user's source line.
#include <cstdint>
#include <string>
#include <vector>

#include "analyse/classifier.hpp"
#include "analyse/steps.hpp"
#include "store/run_database.hpp"

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
  // Sync sites: the GPU idle time after its calls returned (its bubble), summed over the calls it
  // could be measured for (bubble_calls; 0: not measured). On the GPU timeline, from the return to
  // the next GPU activity; else from the return to the thread's next launch (bubble_on_gpu false).
  int64_t bubble_ns = 0, bubble_calls = 0;
  bool bubble_on_gpu = false;
};

// "file:line in function": "?" for an unknown file, no " in ..." for an unknown function.
std::string site_location(const SyncSite& site);

// What names a site from one run to the next (diff, audit baselines): the operation's key (never
// its words: a reworded operation must not make it new), the file, the function and the text of
// the line (trimmed), never its number: an unrelated edit above it must not make it new either.
std::string site_identity(const SyncSite& site);
// The identity trainshim-baseline/1 files hold: the operation's words in place of its key.
std::string worded_site_identity(const SyncSite& site);

// One call of a sync site, as recorded one by one (`events`, and `recent_events` for blocking copies).
struct SyncCall {
  int64_t begin_ns = 0, end_ns = 0;
  int64_t tid = 0;
  SiteKind kind = SiteKind::HiddenSync;  // HiddenSync or ExplicitSync: the list its site is in
  std::size_t site = 0;                  // its index in that list
};

struct RankSyncs {
  Steps steps;
  int64_t span_ns = 0;
  std::vector<SyncSite> hidden;             // by blocked time, largest first
  std::vector<SyncSite> explicit_;          // idem
  std::vector<SyncSite> pageable_copies;    // copies from or to pageable memory, by the user's line
  int64_t pageable_upload_ns_in_steps = 0;  // the host's time in pageable H2D copies begun within the steps
  std::vector<SyncSite> polls;              // cudaStreamQuery loops: not waits, reported with their rate
  std::vector<SyncCall> calls;              // the calls of the hidden and explicit sites, in time order
};

// The user's frame of a call with these stacks: its innermost Python frame outside libraries, else
// the program's; `python` and `native` filled from the shape.
SyncSite user_frame(const SyncShape& shape);

// The classes of calls the sync readers select, by what is_host_sync makes of them.
// Sync, free: host syncs whatever their arguments (cudaFree(nullptr) aside).
bool waits_by_class(ApiClass c);
// And polls: the report's rows per API.
bool waits_or_polls(ApiClass c);
// And copies: every class a sync, poll or pageable-copy site can come from.
bool may_wait_or_poll(ApiClass c);

// collectives: the process's collective calls in time order (load_collective_calls), for the steps.
RankSyncs load_syncs(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                     std::vector<CollectiveCall> collectives);

// The process's steps alone, as load_syncs finds them.
Steps load_steps(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                 std::vector<CollectiveCall> collectives);

// Orders the hidden and the explicit sites by their bubbles, largest first, in a list where some
// were measured (the blocked time between equals); the calls follow their sites.
void rank_by_bubble(RankSyncs& rs);

}  // namespace trainshim::cli
