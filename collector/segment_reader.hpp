#pragma once
// One producer's segment as the collector sees it: mapped, validated, drained.
#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainshim/protocol.hpp"

namespace trainshim::collector {

struct DrainCounts {
  uint64_t records = 0;
  uint64_t malformed = 0;    // failed validate_record: not stored
  uint64_t unpublished = 0;  // claimed by a producer that died before finishing the write
};

class SegmentReader {
 public:
  // Throws std::runtime_error with the reason when the segment cannot be read.
  explicit SegmentReader(const std::string& name);

  const std::string& name() const { return name_; }
  const SegmentHeader& header() const { return *header_; }

  // Whether the producing process still exists (a zombie does not count).
  bool producer_alive() const;

  // Hands every complete record to `sink`. With `producer_gone`, a slot its producer claimed but
  // never finished is given up (counted) instead of waited for.
  DrainCounts drain(const std::function<void(const EventRecord&)>& sink, bool producer_gone);

  // Side records (stacks, modules, strings), in the order the producer published them.
  DrainCounts drain_side(const std::function<void(const SideRecord&)>& sink, bool producer_gone);

  uint64_t dropped_ring_full() const;
  uint64_t dropped_side_full() const;
  uint64_t dropped_not_ready() const { return header_->dropped_not_ready.load(std::memory_order_relaxed); }

  // Removes the segment's name; the mapping stays valid until this reader is destroyed.
  void unlink();

 private:
  std::string name_;
  boost::interprocess::mapped_region region_;
  SegmentHeader* header_ = nullptr;
};

// The names of this user's segments of `job` under /dev/shm.
std::vector<std::string> list_segments(uid_t uid, const std::string& job);

}  // namespace trainshim::collector
