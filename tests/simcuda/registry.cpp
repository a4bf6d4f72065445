// The registry of memory the simulated runtime knows: "device" allocations (plain host memory
// that the runtime calls device memory) and pinned host memory. Everything else is pageable.
#include "internal.h"

#include <map>
#include <shared_mutex>

namespace simcuda {
namespace {

struct Registry {
  std::shared_mutex mu;
  std::map<std::uintptr_t, Range> ranges;  // keyed by base address
};

// Leaked on purpose: stream workers may still look up ranges while the process exits.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// The range containing p, or end(). Zero-sized ranges contain their base only.
std::map<std::uintptr_t, Range>::iterator containing(Registry& reg, std::uintptr_t p) {
  auto it = reg.ranges.upper_bound(p);
  if (it == reg.ranges.begin()) return reg.ranges.end();
  --it;
  const Range& r = it->second;
  if (p == r.base || p - r.base < r.size) return it;
  return reg.ranges.end();
}

}  // namespace

void register_range(const Range& r) {
  Registry& reg = registry();
  std::unique_lock lock(reg.mu);
  reg.ranges[r.base] = r;
}

std::optional<Range> unregister_range(std::uintptr_t base) {
  Registry& reg = registry();
  std::unique_lock lock(reg.mu);
  auto it = reg.ranges.find(base);
  if (it == reg.ranges.end()) return std::nullopt;
  Range r = it->second;
  reg.ranges.erase(it);
  return r;
}

std::optional<Range> find_range(const void* p) {
  if (p == nullptr) return std::nullopt;
  Registry& reg = registry();
  std::shared_lock lock(reg.mu);
  auto it = containing(reg, reinterpret_cast<std::uintptr_t>(p));
  if (it == reg.ranges.end()) return std::nullopt;
  return it->second;
}

bool overlaps_any(std::uintptr_t base, std::size_t size) {
  Registry& reg = registry();
  std::shared_lock lock(reg.mu);
  if (containing(reg, base) != reg.ranges.end()) return true;
  // A range starting inside [base, base+size) also overlaps.
  auto it = reg.ranges.upper_bound(base);
  return it != reg.ranges.end() && it->first < base + size;
}

}  // namespace simcuda
