#pragma once
// A bounded multi-producer single-consumer ring in shared memory. Producers never wait: a full
// ring drops the record and counts it. Threads of one process normally each use their own ring,
// so the claim below is uncontended; sharing a ring stays correct (lock-free compare-exchange).
#include <cstdint>
#include <optional>

#include "trainshim/protocol.hpp"

namespace trainshim {

template <class SlotType>
class BasicRing {
 public:
  using Record = decltype(SlotType::record);

  BasicRing(RingControl* control, SlotType* slots, uint32_t capacity)
      : control_(control), slots_(slots), mask_(capacity - 1), shift_(__builtin_ctz(capacity)) {}

  // Claims the next slot for a record written in place, then handed over with publish(); nullptr
  // (and the loss counted) when the ring is full.
  SlotType* claim(uint64_t& publish_mark) {
    uint64_t pos = control_->head.load(std::memory_order_relaxed);
    for (;;) {
      SlotType& slot = slots_[pos & mask_];
      const uint64_t free_mark = (pos >> shift_) * 2;
      const uint64_t state = slot.state.load(std::memory_order_acquire);
      if (state == free_mark) {
        if (control_->head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          publish_mark = free_mark + 1;
          return &slot;
        }
      } else if (state < free_mark) {
        control_->dropped.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      } else {
        pos = control_->head.load(std::memory_order_relaxed);
      }
    }
  }

  static void publish(SlotType* slot, uint64_t publish_mark) { slot->state.store(publish_mark, std::memory_order_release); }

  // Returns false (and counts the loss) when the ring is full.
  bool push(const Record& record) {
    uint64_t mark = 0;
    SlotType* slot = claim(mark);
    if (!slot) return false;
    slot->record = record;
    publish(slot, mark);
    return true;
  }

  enum class PopStatus { Record, Empty, Unpublished };

  // Consumer side, in two phases: read() copies the record at `pos` and leaves its slot to the
  // producer's loss (not free), release() gives slots back once their records are safe elsewhere.
  // Unpublished: a producer claimed `pos` but has not finished writing it (still writing, or it
  // died mid-write).
  PopStatus read(uint64_t pos, Record& out) const {
    const SlotType& slot = slots_[pos & mask_];
    if (slot.state.load(std::memory_order_acquire) != (pos >> shift_) * 2 + 1)
      return head() > pos ? PopStatus::Unpublished : PopStatus::Empty;
    out = slot.record;
    return PopStatus::Record;
  }

  // Frees the slots of positions [from, to) for the producers' next lap and moves the tail to `to`.
  void release(uint64_t from, uint64_t to) {
    for (uint64_t pos = from; pos < to; ++pos)
      slots_[pos & mask_].state.store((pos >> shift_) * 2 + 2, std::memory_order_release);
    control_->tail.store(to, std::memory_order_release);
  }

  // read() and release() of the record at the tail at once. `skip_unpublished` gives up an
  // unpublished slot at the tail.
  PopStatus pop(Record& out) {
    const uint64_t pos = tail();
    const PopStatus status = read(pos, out);
    if (status == PopStatus::Record) release(pos, pos + 1);
    return status;
  }

  void skip_unpublished() {
    const uint64_t pos = tail();
    release(pos, pos + 1);
  }

  uint64_t head() const { return control_->head.load(std::memory_order_acquire); }
  uint64_t tail() const { return control_->tail.load(std::memory_order_acquire); }
  uint64_t dropped() const { return control_->dropped.load(std::memory_order_relaxed); }
  uint64_t pending() const {
    return control_->head.load(std::memory_order_acquire) - control_->tail.load(std::memory_order_acquire);
  }

 private:
  RingControl* control_;
  SlotType* slots_;
  uint64_t mask_;
  uint32_t shift_;
};

using RingView = BasicRing<Slot>;
using SideRingView = BasicRing<SideSlot>;

// Where a segment's rings lie. The collector takes it once from a header it validated and uses
// only this copy: whoever can write the segment can change the header's fields afterwards.
struct SegmentGeometry {
  uint32_t ring_count;
  uint32_t ring_capacity;
  uint32_t side_capacity;
  uint64_t segment_bytes;
};

inline SegmentGeometry geometry_of(const SegmentHeader& header) {
  return {header.ring_count, header.ring_capacity, header.side_capacity, header.segment_bytes};
}

// `segment`: the start of the mapping.
inline RingView ring_of(void* segment, const SegmentGeometry& g, uint32_t index) {
  auto* base = static_cast<char*>(segment) + sizeof(SegmentHeader) + index * ring_bytes(g.ring_capacity);
  return RingView(reinterpret_cast<RingControl*>(base), reinterpret_cast<Slot*>(base + sizeof(RingControl)),
                  g.ring_capacity);
}

inline SideRingView side_ring_of(void* segment, const SegmentGeometry& g) {
  auto* base = static_cast<char*>(segment) + sizeof(SegmentHeader) + uint64_t{g.ring_count} * ring_bytes(g.ring_capacity);
  return SideRingView(reinterpret_cast<RingControl*>(base), reinterpret_cast<SideSlot*>(base + sizeof(RingControl)),
                      g.side_capacity);
}

// The producer's own segment: it wrote the header, and it alone trusts it.
inline RingView ring_of(SegmentHeader* header, uint32_t index) { return ring_of(header, geometry_of(*header), index); }
inline SideRingView side_ring_of(SegmentHeader* header) { return side_ring_of(header, geometry_of(*header)); }

}  // namespace trainshim
