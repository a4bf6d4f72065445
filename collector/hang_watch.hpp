#pragma once
// Hang detection while the job runs: a collective that some ranks of a communicator entered and
// others have not, for longer than a threshold (`collective`), or a job in which no rank made
// progress for that long with no collective pending (`no_progress`). The collector sees the
// ranks of its own node. Each hang names what the ranks it names are doing now, from their main
// thread's latest samples.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ingest.hpp"
#include "trainshim/protocol.hpp"
#include "trainshim/schema.hpp"

namespace trainshim::collector {

using schema::hang_kind_name;
using schema::HangKind;

struct Hang {
  HangKind kind = HangKind::Collective;
  uint64_t communicator = 0;  // 0 for no_progress
  uint32_t sequence = 0;      // 0 for no_progress
  std::string op;             // "ncclAllReduce", ...; empty for no_progress
  std::vector<int> waiting;   // ranks inside the collective; for no_progress every rank watched
  std::vector<int> missing;   // ranks that never entered it
  int64_t waited_ns = 0;
  std::string message;
  std::string stacks;  // hangs.stacks: the named ranks' main threads and their Python frames
  bool fresh = false;  // first reported on this check
};

// What one process of the job is doing, as the collector last saw it.
struct ProcessNow {
  int rank = -1;  // global rank, -1 when unknown
  int pid = 0;
  bool sampled = false;        // its sampler is on: only such processes tell no progress apart
  int64_t last_record_ns = 0;  // latest end of a record that was not the sampler's; 0: none
  bool main_sampled = false;   // `main` holds its main thread's latest sample
  ThreadNow main;
};

// A Python stack in words: the user's frame ("file:line in function", empty if unknown) and every
// frame innermost first ("function (file:line)").
struct StackWords {
  std::string where;
  std::vector<std::string> frames;
};
// The words for stack `python_stack` of process `process` (its id in the database).
using StackNamer = std::function<StackWords(int64_t process, uint32_t python_stack)>;

// What a sampled thread is doing in words: "sleeping in futex for 26 s".
std::string thread_doing(const ThreadNow& thread, int64_t now_ns);

// "0,2,3": how ranks are listed in hang messages and in the hangs table.
std::string rank_list(const std::vector<int>& ranks);

class HangWatch {
 public:
  explicit HangWatch(int64_t threshold_ns) : threshold_ns_(threshold_ns) {}

  // A process's collectives, their timings, group ends and communicator inits (which make the
  // rank a member that must enter each collective of the communicator, from the first): `rank`
  // is its global rank (-1 when unknown), `where` the user's Python frame of the call, if any.
  void observe(int rank, const EventRecord& record, int64_t begin_ns, const std::string& where);
  // What a rank (its global rank; its rank in the communicator when unknown) did last, outside
  // the collectives: said of a rank that never entered a hung collective.
  void note_activity(int who, std::string_view api, const std::string& where, int64_t at_ns);
  // A process's state, rewritten after each pass that read it; `process` is its id in the database.
  void note_process(int64_t process, const ProcessNow& now) { processes_[process] = now; }
  // The process ended: it is no longer watched for progress.
  void forget_process(int64_t process) { processes_.erase(process); }

  // The hangs at time `now_ns` (CLOCK_MONOTONIC of this host); `namer` turns the named ranks'
  // stacks into words (none: they are not named).
  std::vector<Hang> check(int64_t now_ns, const StackNamer& namer = {});

 private:
  struct Member {
    int rank = -1;
    uint32_t entered = 0;   // highest sequence it called
    uint32_t finished = 0;  // highest sequence the GPU completed for it
    // Whether `entered` will ever be timed: not when captured into a graph, without an event, or
    // in a group whose launch went to NCCL's own thread or never happened. Only then does a
    // missing timing mean the member is still waiting.
    bool entered_timed = true;
    bool entered_in_group = false;  // its group's end has not been seen yet
    // A launch on NCCL's thread (non-blocking communicator) is timed when the program waits for
    // it with ncclCommGetAsyncError, as PyTorch does: once one such timing came from this member,
    // its later ones are expected too.
    bool waits_for_launches = false;
  };
  struct Communicator {
    uint32_t size = 0;
    std::map<uint32_t, Member> members;  // by rank in the communicator
    uint32_t newest = 0;                 // highest sequence any member entered
    int64_t newest_since_ns = 0;         // when the first member entered it
    std::string newest_op;
    uint32_t reported = 0;  // the sequence already reported as hung
    // The stacks of the ranks named in its newest hang, by global rank, as last sampled.
    std::map<int, std::string> hung_stacks;
  };
  struct LastActivity {
    std::string api, where;
    int64_t at_ns = 0;
  };
  // Whether a collective of `c` is under way: some member has not entered its newest, or one
  // that is timed has not finished what it entered.
  static bool pending(const Communicator& c);
  std::vector<Hang> collective_hangs(int64_t now_ns, const StackNamer& namer);
  // The no_progress hang, if there is one.
  std::vector<Hang> no_progress_hang(int64_t now_ns, const StackNamer& namer);
  // The process that is rank `rank` with a sample of its main thread, null if none.
  const std::pair<const int64_t, ProcessNow>* sampled_rank(int rank) const;
  // "rank 1 main thread sleeping in futex for 26 s at data.py:41 in get_batch".
  static std::string rank_doing(const std::pair<const int64_t, ProcessNow>& process, int64_t now_ns,
                                const StackNamer& namer);
  // One process's part of hangs.stacks: its main thread and its Python frames.
  static std::string stack_of(const std::pair<const int64_t, ProcessNow>& process, int64_t now_ns,
                              const StackNamer& namer);
  // hangs.stacks of these processes.
  static std::string stacks_of(const std::vector<const std::pair<const int64_t, ProcessNow>*>& processes,
                               int64_t now_ns, const StackNamer& namer);

  int64_t threshold_ns_;
  std::map<uint64_t, Communicator> communicators_;
  std::map<int, LastActivity> last_;         // by global rank (rank in communicator when unknown)
  std::map<int64_t, ProcessNow> processes_;  // by id in the database
  bool no_progress_reported_ = false;        // the no_progress hang going on was reported
};

}  // namespace trainshim::collector
