#pragma once
// Which copy a wait directly follows: a cudaStreamSynchronize right after a cudaMemcpyAsync on the
// same thread and stream is that copy's wait (memcpy-then-sync), and is named after it. The
// collector stores the answer with every call (calls.follows_copy, events.follows_copy).
#include <cstdint>
#include <unordered_map>

#include "trainshim/api.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim {

// The classes that take part: copies, and the calls that may wait for one (sync, free, poll).
inline constexpr bool takes_part_in_copy_pairing(ApiClass c) {
  return c == ApiClass::Copy || c == ApiClass::Sync || c == ApiClass::Free || c == ApiClass::Poll;
}

// One thread's last call among those classes.
struct LastPairedCall {
  bool copy = false;
  uint64_t stream = 0;
  Direction direction = Direction::None;
};

// For a call of a class that takes part, made by the thread whose last such call was `last`:
// the direction of the copy it directly follows (None when none, and always for a copy); then
// remembers the call as the thread's last.
inline Direction follow_copy(LastPairedCall& last, ApiClass api_class, uint64_t stream, Direction direction) {
  const bool copy = api_class == ApiClass::Copy;
  const Direction follows = !copy && last.copy && last.stream == stream ? last.direction : Direction::None;
  last = {copy, stream, direction};
  return follows;
}

// The same for a whole process, by thread. Feed it the process's calls of the classes that take
// part, each thread's in the order it made them.
class CopyPairing {
 public:
  Direction observe(uint32_t tid, ApiClass api_class, uint64_t stream, Direction direction) {
    return follow_copy(last_[tid], api_class, stream, direction);
  }

 private:
  std::unordered_map<uint32_t, LastPairedCall> last_;
};

}  // namespace trainshim
