#pragma once
// One producer's segment as the collector sees it: checked, mapped, validated, drained.
//
// What the reader trusts: a segment is opened only if it is a regular file (not followed through a
// symbolic link) that this user owns and nobody else may read or write; its header is copied once
// and validated, and the rings are located from that copy only. Whoever can still write the segment
// (the producer, or anything running as this user) can at worst garble its own records (validated
// one by one) or shrink the file: an access that then faults is turned into truncated().
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "trainshim/protocol.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::collector {

struct DrainCounts {
  uint64_t records = 0;
  uint64_t malformed = 0;    // failed validate_record: not stored
  uint64_t unpublished = 0;  // claimed by a producer that died before finishing the write
};

// Why a segment cannot be read, with the message that says so.
class SegmentError : public std::runtime_error {
 public:
  enum class Reason {
    Untrusted,   // a link, another user's file, a mode open to others
    Unreadable,  // cannot be opened, stated or mapped
    Shrank,      // truncated while being opened
    BadHeader,   // header_problem() says what
  };
  SegmentError(Reason reason, const std::string& message, HeaderProblem problem = HeaderProblem::Ok)
      : std::runtime_error(message), reason_(reason), problem_(problem) {}
  explicit SegmentError(HeaderProblem problem)
      : SegmentError(Reason::BadHeader, std::string(header_problem_text(problem)), problem) {}
  Reason reason() const { return reason_; }
  HeaderProblem header_problem() const { return problem_; }
  // A producer sizes its segment, then fills and publishes the header: a segment that is merely
  // young may be readable on a later pass.
  bool young() const { return problem_ == HeaderProblem::NotPublished || problem_ == HeaderProblem::TooSmall; }

 private:
  Reason reason_;
  HeaderProblem problem_;
};

class SegmentReader {
 public:
  // Slots before a moving head that drain() leaves for a later pass (see drain()).
  static constexpr uint64_t kReaderLag = 64;
  static constexpr uint64_t kLagRingSlots = 16 * kReaderLag;

  // Throws SegmentError when the segment cannot be read or is not trusted.
  explicit SegmentReader(const std::string& name);
  ~SegmentReader();
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;

  const std::string& name() const { return name_; }
  // The header as validated when the segment was opened (a copy: later writes to the segment do not
  // change it). Its counters are those of that moment; the live ones have accessors below.
  const SegmentHeader& header() const { return header_; }
  const SegmentGeometry& geometry() const { return geometry_; }

  // Whether the producing process image still runs: it holds the segment's liveness lock
  // (protocol.hpp), or, its lock dropped by the program itself, the process of the header's pid
  // still maps this very segment (a pid of another namespace maps nothing of ours).
  bool producer_alive() const;

  // Reading is two-phase, so that a collector that dies loses nothing: drain() hands out records
  // after the reader's own cursor but leaves their slots to the producer (a full ring counts its
  // losses rather than overwrite them); release() gives them back once they are committed.

  // Hands every complete record after the cursor to `sink` (a copy: the sink never touches the
  // segment). With `producer_gone`, a slot its producer claimed but never finished is given up
  // (counted) instead of waited for.
  DrainCounts drain(const std::function<void(const EventRecord&)>& sink, bool producer_gone);

  // Side records (stacks, modules, strings), in the order the producer published them.
  DrainCounts drain_side(const std::function<void(const SideRecord&)>& sink, bool producer_gone);

  // Gives back to the producer every slot drained so far (events and side).
  void release();

  // Per ring (and for the side ring) the next position to read: what the drains so far handed out
  // ends there.
  struct Positions {
    std::vector<uint64_t> rings;
    uint64_t side = 0;
  };
  Positions positions() const;

  // Skips, and releases, what an earlier reader of this segment handed out and had committed up to
  // `committed` (from a database: untrusted, each position is kept within what the ring holds). A
  // record of a live producer that is not yet complete stops the skip there. Call before drain().
  void resume(const Positions& committed);

  // Live counters of the producer (0 once truncated()).
  uint64_t dropped_ring_full() const;
  uint64_t dropped_side_full() const;
  uint64_t dropped_not_ready() const;
  uint64_t untimed_capturing() const;
  uint64_t untimed_no_event() const;
  uint32_t python_stacks() const;
  uint32_t gpu_timeline() const;  // GpuTimeline, unchecked (gpu_timeline_name names any value)
  uint64_t gpu_records_dropped() const;
  uint32_t sampler() const;    // SamplerState, unchecked (sampler_state_name names any value)
  uint32_t sample_hz() const;  // unchecked
  uint64_t samples_torn() const;

  // The segment shrank under the reader (an access faulted with SIGBUS): nothing more is read from
  // it; what was drained before stays valid.
  bool truncated() const { return truncated_; }

  // Removes the segment's name; the mapping stays valid until this reader is destroyed.
  void unlink();

 private:
  // Runs `access` with a SIGBUS inside this mapping turned into `false` (and truncated()). Between
  // its accesses to the mapping `access` must hold nothing with a destructor: the fault returns
  // here with siglongjmp.
  template <class Access>
  bool guarded(Access&& access) const {
    return guarded_call([](void* context) { (*static_cast<std::remove_reference_t<Access>*>(context))(); }, &access);
  }
  // Never inlined: the variables `access` writes must not live in the frame that calls sigsetjmp.
  [[gnu::noinline]] bool guarded_call(void (*access)(void*), void* context) const;
  template <class Value>
  Value read_live(Value (*read)(const SegmentHeader&)) const;

  std::string name_;
  // When the producer was last seen alive by its mapping of the segment, its lock gone.
  mutable std::optional<std::chrono::steady_clock::time_point> mapped_seen_;
  int fd_ = -1;  // kept for asking about the liveness lock
  void* mapping_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  SegmentHeader header_;
  SegmentGeometry geometry_{};
  mutable bool truncated_ = false;
  // Per ring, then the side ring last: the next position to hand out, and where this reader last
  // moved the shared tail to (its own copy: the segment's can be rewritten by anyone).
  std::vector<uint64_t> read_;
  std::vector<uint64_t> released_;
  std::vector<uint64_t> head_seen_;  // per event ring: its head at the previous drain
};

// The names of this user's segments of `job` under /dev/shm.
std::vector<std::string> list_segments(uid_t uid, const std::string& job);

}  // namespace trainshim::collector
