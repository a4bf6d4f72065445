#pragma once
// One interposed call being recorded. The generated wrappers (hooks.cpp) do, for API A:
//   Call<A> call;  if active: call.draft = describe(...); call.begin(); real(...); call.end(rc)
#include "core/communicators.hpp"
#include "core/gpu_timing.hpp"
#include "core/group_timing.hpp"
#include "core/recorder.hpp"
#include "core/sampler.hpp"
#include "core/stacks.hpp"
#include "describe.hpp"
#include "trainshim/clock.hpp"

namespace trainshim::shim {

inline constexpr uint32_t kPollStackEvery = 256;

// Whether a launch is the first on its thread since a host sync returned there (then the flag is
// cleared: a nested launch, made inside another hook, is the first too although it is not recorded).
// The hook reads the flag before it calls this: every other launch pays only that read and a branch.
inline bool launch_after_sync() {
  ThreadState& thread = thread_state();
  if (!thread.synced) [[likely]]
    return false;
  thread.synced = false;
  return true;
}

template <Api A>
class Call {
  static constexpr ApiClass kClass = kApis[static_cast<std::size_t>(A)].api_class;
  static constexpr bool kSynchronousCopy = is_synchronous_copy(A);

 public:
  Call() {
    ThreadState& thread = thread_state();
    if (thread.busy) return;
    thread.busy = true;
    recorder_ = active_recorder();
    if (recorder_) thread_ = &thread;
    else thread.busy = false;
  }
  ~Call() {
    if (thread_) thread_->busy = false;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool active() const { return recorder_ != nullptr; }

  // Stacks are taken before the clock starts: their cost is not counted as time in the call.
  __attribute__((always_inline)) void begin() {
    if (wants_stacks()) stacks_ = capture_stacks(recorder_->header());
    if constexpr (kClass == ApiClass::GroupStart) group_started();
    // Inside a group the call launches nothing: its group is timed instead (group_call).
    if constexpr (kClass == ApiClass::Collective) {
      launch_forget(draft.comm);
      if (!in_group()) timing_ = timing_begin(recorder_->header(), reinterpret_cast<void*>(draft.stream));
    }
    begin_ = ticks();
  }

  __attribute__((always_inline)) void end(int result) {
    if constexpr (kClass == ApiClass::SetDevice) {
      // Not recorded: the sampler publishes the device's PCI bus and NUMA node.
      if (result == 0) note_device(int(draft.argument));
      return;
    }
    if constexpr (kClass == ApiClass::CommQuery) {
      // Polled in a loop by PyTorch: not recorded, only watched for the end of a launch.
      if (result == 0) launch_checked(draft.comm, *reinterpret_cast<const int*>(draft.result_object));
      return;
    }
    const uint64_t end_ticks = ticks();
    if constexpr (kClass == ApiClass::GroupEnd) {
      if (group_ended()) {
        const bool simulated = draft.argument != 0;
        if (simulated) forget_group_numbers();
        draft.flags = group_finished(*recorder_, result, simulated, draft.detail);
      }
    }
    // A non-blocking communicator is handed out with ncclInProgress (init.cc ncclCommInitRankConfig).
    const bool created = result == 0 || (kClass == ApiClass::CommInit && result == describe::kNcclInProgress);
    if (created && draft.after) draft.after(draft);
    auto fill = [&](EventRecord& r) {
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
      r.sequence = draft.sequence;
      r.peer = draft.peer;
      r.flags = draft.flags;
    };
    if constexpr (kClass == ApiClass::Collective) {
      EventRecord collective{};
      fill(collective);
      void* stream = reinterpret_cast<void*>(draft.stream);
      if (in_group()) {
        group_call(recorder_->header(), stream, draft.comm, collective);
        recorder_->record(*thread_, [&](EventRecord& r) { r = collective; });
      } else if (result == describe::kNcclInProgress) {
        // A call on a non-blocking communicator is a group of its own whose launch went to
        // NCCL's thread (enqueue.cc ncclEnqueueCheck): an end event now would precede the kernel.
        collective.flags |= kGroupInProgress;
        recorder_->record(*thread_, [&](EventRecord& r) { r = collective; });
        launch_pending(*recorder_, draft.comm, stream, timing_, collective);
      } else {
        collective.flags |= timing_.untimed;
        recorder_->record(*thread_, [&](EventRecord& r) { r = collective; });
        timing_end(*recorder_, timing_, stream, collective);
      }
    } else {
      recorder_->record(*thread_, fill);
    }
    if constexpr (can_host_sync(kClass))
      if (is_host_sync(kClass, draft.direction, draft.host_memory, kSynchronousCopy, draft.object == 0))
        thread_->synced = true;
    check_collector_at(end_ticks);
  }

  describe::Draft draft;

 private:
  // Which events carry the caller's native and Python stacks: captures_stacks (api.hpp), and one in
  // kPollStackEvery of a thread's polls (a polling loop calls thousands of times from one place).
  // cudaFree(nullptr) only creates the context (PyTorch's initializeCudaContext): no wait.
  bool wants_stacks() {
    if constexpr (kClass == ApiClass::Poll) return thread_->polls++ % kPollStackEvery == 0;
    return captures_stacks(kClass, draft.direction, draft.host_memory, kSynchronousCopy, draft.object == 0);
  }

  Recorder* recorder_ = nullptr;
  ThreadState* thread_ = nullptr;
  uint64_t begin_ = 0;
  StackIds stacks_;
  TimingToken timing_;
};

}  // namespace trainshim::shim
