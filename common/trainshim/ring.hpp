#pragma once
// The rings in shared memory. An event ring is written by the one thread that owns it (its owner
// word, claimed when the thread first records) with plain stores, or, for the threads beyond the
// rings, shared through a compare-exchange on `head` (the last ring, and the side ring). Either
// way producers never wait: a full ring drops the record and counts it. The collector alone
// reads, in two phases: read() leaves the slot to the producer's loss until release().
//
// A slot's state is 2*lap+1 once the record of that lap (position >> log2(capacity)) is
// complete, anything else before: zero-filled memory is an empty ring, and a slot claimed but
// never finished (a producer that died mid-write) is told from a complete one. Only producers
// write states; whether a slot is free follows from `tail`, which only the collector writes.
#include <algorithm>
#include <cstdint>

#include "trainshim/protocol.hpp"

namespace trainshim {

template <class SlotType>
class BasicRing {
 public:
  using Record = decltype(SlotType::record);

  BasicRing(RingControl* control, SlotType* slots, uint32_t capacity)
      : control_(control), slots_(slots), capacity_(capacity), mask_(capacity - 1), shift_(__builtin_ctz(capacity)) {}

  // Shared producer side: claims the next slot for a record written in place, then handed over
  // with publish(); nullptr (and the loss counted) when the ring is full.
  SlotType* claim(uint64_t& publish_mark) {
    uint64_t pos = control_->head.load(std::memory_order_relaxed);
    do {
      // Acquire: the collector's reads of the slot's previous record are done before it is reused.
      if (pos - control_->tail.load(std::memory_order_acquire) >= capacity_) {
        control_->dropped.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
    } while (!control_->head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed));
    publish_mark = (pos >> shift_) * 2 + 1;
    return &slots_[pos & mask_];
  }

  static void publish(SlotType* slot, uint64_t publish_mark) {
    slot->state.store(publish_mark, std::memory_order_release);
  }

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
  bool complete(uint64_t pos) const {
    return slots_[pos & mask_].state.load(std::memory_order_acquire) == (pos >> shift_) * 2 + 1;
  }
  PopStatus read(uint64_t pos, Record& out) const {
    if (!complete(pos)) return head() > pos ? PopStatus::Unpublished : PopStatus::Empty;
    out = slots_[pos & mask_].record;
    return PopStatus::Record;
  }

  // Gives the slots before `to` back to the producers. Release: the reads of their records are
  // done before a producer reuses them.
  void release(uint64_t to) { control_->tail.store(to, std::memory_order_release); }

  // read() and release() of the record at the tail at once. `skip_unpublished` gives up an
  // unpublished slot at the tail.
  PopStatus pop(Record& out) {
    const uint64_t pos = tail();
    const PopStatus status = read(pos, out);
    if (status == PopStatus::Record) release(pos + 1);
    return status;
  }
  void skip_unpublished() { release(tail() + 1); }

  uint64_t head() const { return control_->head.load(std::memory_order_acquire); }
  uint64_t tail() const { return control_->tail.load(std::memory_order_acquire); }
  uint64_t dropped() const { return control_->dropped.load(std::memory_order_relaxed); }
  uint64_t pending() const { return head() - tail(); }

  RingControl* control() const { return control_; }
  SlotType* slots() const { return slots_; }
  uint32_t capacity() const { return capacity_; }

 private:
  RingControl* control_;
  SlotType* slots_;
  uint32_t capacity_;
  uint64_t mask_;
  uint32_t shift_;
};

// The producer side of a ring its thread owns alone: plain loads and stores, and two release
// stores to hand a record over (its slot's state, then `head`); no locked instruction. The tail
// is read only when the ring looks full. Constant-initialised, so it can live in a thread's
// initial-exec TLS.
class OwnedRingWriter {
 public:
  constexpr OwnedRingWriter() = default;
  explicit OwnedRingWriter(const BasicRing<Slot>& ring)
      : control_(ring.control()),
        slots_(ring.slots()),
        capacity_(ring.capacity()),
        shift_(uint32_t(__builtin_ctz(ring.capacity()))),
        head_(ring.control()->head.load(std::memory_order_acquire)),
        tail_seen_(ring.control()->tail.load(std::memory_order_acquire)) {}

  RingControl* control() const { return control_; }

  // The slot for the next record, or nullptr (the loss counted) when the ring is full.
  Slot* claim() {
    if (head_ - tail_seen_ >= capacity_) [[unlikely]] {
      tail_seen_ = control_->tail.load(std::memory_order_acquire);
      if (head_ - tail_seen_ >= capacity_) {
        control_->dropped.store(control_->dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    return &slots_[head_ & (capacity_ - 1)];
  }

  void publish(Slot* slot) {
    slot->state.store((head_ >> shift_) * 2 + 1, std::memory_order_release);
    control_->head.store(++head_, std::memory_order_release);
  }

 private:
  RingControl* control_ = nullptr;
  Slot* slots_ = nullptr;
  uint64_t capacity_ = 0;
  uint32_t shift_ = 0;
  uint64_t head_ = 0;       // the owner alone moves the ring's head: its own copy is exact
  uint64_t tail_seen_ = 0;  // the collector's tail when last read: never ahead of the real one
};

using RingView = BasicRing<Slot>;
using SideRingView = BasicRing<SideSlot>;

// Where a segment's rings lie. The collector takes it once from a header it validated and uses
// only this copy: whoever can write the segment can change the header's fields afterwards.
struct SegmentGeometry {
  uint32_t ring_count;
  uint32_t first_ring_capacity;
  uint32_t ring_capacity;
  uint32_t side_capacity;
  uint64_t segment_bytes;

  uint32_t capacity_of(uint32_t ring) const { return ring == 0 ? first_ring_capacity : ring_capacity; }
  uint32_t smallest_capacity() const {
    return ring_count == 1 ? first_ring_capacity : std::min(first_ring_capacity, ring_capacity);
  }
  // From the start of the mapping.
  uint64_t ring_offset(uint32_t ring) const {
    if (ring == 0) return sizeof(SegmentHeader);
    return sizeof(SegmentHeader) + ring_bytes(first_ring_capacity) + uint64_t{ring - 1} * ring_bytes(ring_capacity);
  }
  uint64_t side_ring_offset() const {
    return sizeof(SegmentHeader) + event_rings_bytes(ring_count, first_ring_capacity, ring_capacity);
  }
};

inline SegmentGeometry geometry_of(const SegmentHeader& header) {
  return {header.ring_count, header.first_ring_capacity, header.ring_capacity, header.side_capacity,
          header.segment_bytes};
}

// `segment`: the start of the mapping.
inline RingView ring_of(void* segment, const SegmentGeometry& g, uint32_t index) {
  auto* base = static_cast<char*>(segment) + g.ring_offset(index);
  return RingView(reinterpret_cast<RingControl*>(base), reinterpret_cast<Slot*>(base + sizeof(RingControl)),
                  g.capacity_of(index));
}

inline SideRingView side_ring_of(void* segment, const SegmentGeometry& g) {
  auto* base = static_cast<char*>(segment) + g.side_ring_offset();
  return SideRingView(reinterpret_cast<RingControl*>(base), reinterpret_cast<SideSlot*>(base + sizeof(RingControl)),
                      g.side_capacity);
}

// The producer's own segment: it wrote the header, and it alone trusts it.
inline RingView ring_of(SegmentHeader* header, uint32_t index) { return ring_of(header, geometry_of(*header), index); }
inline SideRingView side_ring_of(SegmentHeader* header) { return side_ring_of(header, geometry_of(*header)); }

}  // namespace trainshim
