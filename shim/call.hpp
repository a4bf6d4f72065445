#pragma once
// One interposed call being recorded. The generated wrappers (hooks.cpp) do, for API A:
//   Call<A> call;  if active: call.draft = describe(...); call.begin(); real(...); call.end(rc)
#include "core/recorder.hpp"
#include "core/stacks.hpp"
#include "describe.hpp"
#include "trainshim/clock.hpp"

namespace trainshim::shim {

template <Api A>
class Call {
  static constexpr ApiClass kClass = kApis[static_cast<std::size_t>(A)].api_class;

 public:
  Call() {
    ThreadState& thread = thread_state();
    if (thread.busy) return;
    thread.busy = true;
    recorder_ = active_recorder();
    if (recorder_) thread_ = &thread; else thread.busy = false;
  }
  ~Call() {
    if (thread_) thread_->busy = false;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool active() const { return recorder_ != nullptr; }

  // Stacks are taken before the clock starts: their cost is not counted as time in the call.
  void begin() {
    if (captures_stacks(kClass) || (kClass == ApiClass::Copy && draft.host_memory == HostMemory::Pageable))
      stacks_ = capture_stacks(recorder_->header());
    begin_ = ticks();
  }

  void end(int result) {
    const uint64_t end_ticks = ticks();
    if constexpr (kClass == ApiClass::PinnedAlloc || kClass == ApiClass::CommInit) {
      if (result == 0 && draft.result_object) draft.object = describe::as_integer(*draft.result_object);
    }
    if constexpr (kClass == ApiClass::PinnedAlloc || kClass == ApiClass::PinnedRegister) {
      if (result == 0) pinned_ranges().add(draft.object, draft.bytes);
    }
    if constexpr (kClass == ApiClass::PinnedFree) {
      if (result == 0) draft.bytes = pinned_ranges().remove(draft.object);
    }
    recorder_->record(*thread_, [&](EventRecord& r) {
      r.begin_ticks = begin_;
      r.end_ticks = end_ticks;
      r.bytes = draft.bytes;
      r.stream = draft.stream;
      r.object = draft.object;
      r.detail = draft.detail;
      r.native_stack = stacks_.native;
      r.python_stack = stacks_.python;
      r.result = result;
      r.rank_in_comm = draft.rank_in_comm;
      r.comm_size = draft.comm_size;
      r.api = static_cast<uint16_t>(A);
      r.direction = static_cast<uint8_t>(draft.direction);
      r.host_memory = static_cast<uint8_t>(draft.host_memory);
      r.reserved = 0;
    });
  }

  describe::Draft draft;

 private:
  Recorder* recorder_ = nullptr;
  ThreadState* thread_ = nullptr;
  uint64_t begin_ = 0;
  StackIds stacks_;
};

}  // namespace trainshim::shim
