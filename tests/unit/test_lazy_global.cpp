// LazyGlobal (shim/core/lazy_global.hpp): one object however many threads ask for it first, and a
// fresh one after a fork's forget().
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/lazy_global.hpp"

namespace trainshim::shim {
namespace {

struct Counted {
  static inline std::atomic<int> made{0};
  static inline std::atomic<int> destroyed{0};
  Counted() { made.fetch_add(1); }
  ~Counted() { destroyed.fetch_add(1); }
  int value = 0;
};

TEST(LazyGlobal, NothingIsMadeUntilAskedThenTheSameObjectIsGiven) {
  static LazyGlobal<int> global;
  EXPECT_EQ(global.made(), nullptr);
  int& first = global.get();
  first = 42;
  EXPECT_EQ(&global.get(), &first);
  EXPECT_EQ(global.made(), &first);
  EXPECT_EQ(global.get(), 42);
}

TEST(LazyGlobal, ThreadsRacingForTheFirstObjectAllGetOneAndTheLosersCopiesAreDeleted) {
  static LazyGlobal<Counted> global;
  Counted::made = 0;
  Counted::destroyed = 0;
  constexpr int kThreads = 8;
  std::vector<Counted*> seen(kThreads);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      while (!go.load()) {
      }
      seen[i] = &global.get();
    });
  go = true;
  for (auto& t : threads) t.join();
  for (Counted* c : seen) EXPECT_EQ(c, global.made());
  EXPECT_EQ(Counted::made.load() - Counted::destroyed.load(), 1);
}

TEST(LazyGlobal, AfterForgetTheNextCallMakesAFreshObjectAndTheOldOneIsLeft) {
  static LazyGlobal<Counted> global;
  Counted& before = global.get();
  before.value = 7;
  const int destroyed = Counted::destroyed.load();
  global.forget();
  EXPECT_EQ(global.made(), nullptr);
  Counted& after = global.get();
  EXPECT_NE(&after, &before);
  EXPECT_EQ(after.value, 0);
  EXPECT_EQ(before.value, 7);  // never destroyed: a lock in it may have been held at fork()
  EXPECT_EQ(Counted::destroyed.load(), destroyed);
  delete &before;  // what a forked child leaves is the test's to free
}

}  // namespace
}  // namespace trainshim::shim
