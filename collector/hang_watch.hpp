#pragma once
// Hang detection while the job runs: a collective that some ranks of a communicator entered and
// others have not, for longer than a threshold. The collector sees the ranks of its own node.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainshim/protocol.hpp"

namespace trainshim::collector {

struct Hang {
  uint64_t communicator = 0;
  uint32_t sequence = 0;
  std::string op;            // "ncclAllReduce", ...
  std::vector<int> waiting;  // ranks inside the collective
  std::vector<int> missing;  // ranks that never entered it
  int64_t waited_ns = 0;
  std::string message;
  bool fresh = false;  // first reported on this check
};

// "0,2,3": how ranks are listed in hang messages and in the hangs table.
std::string rank_list(const std::vector<int>& ranks);

class HangWatch {
 public:
  explicit HangWatch(int64_t threshold_ns) : threshold_ns_(threshold_ns) {}

  // A process's collectives, their timings and group ends: `rank` is its global rank (-1 when
  // unknown), `where` the user's Python frame of the call, if any.
  void observe(int rank, const EventRecord& record, int64_t begin_ns, const std::string& where);
  // What a rank (its global rank; its rank in the communicator when unknown) did last, outside
  // the collectives: said of a rank that never entered a hung collective.
  void note_activity(int who, std::string_view api, const std::string& where, int64_t at_ns);

  // The hangs at time `now_ns` (CLOCK_MONOTONIC of this host).
  std::vector<Hang> check(int64_t now_ns);

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
  };
  struct LastActivity {
    std::string api, where;
    int64_t at_ns = 0;
  };

  int64_t threshold_ns_;
  std::map<uint64_t, Communicator> communicators_;
  std::map<int, LastActivity> last_;  // by global rank (rank in communicator when unknown)
};

}  // namespace trainshim::collector
