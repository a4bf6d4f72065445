#pragma once
// A process-wide object made by the first thread that needs it, not at load: the shim does nothing
// in a process that makes no CUDA call, and runs no constructor of its own before main.
#include <atomic>

namespace trainshim::shim {

template <class T>
class LazyGlobal {
 public:
  constexpr LazyGlobal() = default;

  // The object, made now if there is none; a thread that loses the race to make it deletes its own.
  T& get() {
    T* current = object_.load(std::memory_order_acquire);
    if (current) return *current;
    auto* fresh = new T;
    if (object_.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;
    return *current;
  }
  // The object when one was made, else nullptr.
  T* made() const { return object_.load(std::memory_order_acquire); }
  // In a forked child: the next get() makes a fresh object. The parent's is left, never destroyed:
  // a lock in it may have been held at fork().
  void forget() { object_.store(nullptr, std::memory_order_release); }

 private:
  std::atomic<T*> object_{nullptr};
};

}  // namespace trainshim::shim
