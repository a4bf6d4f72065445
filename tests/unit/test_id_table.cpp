// The stack id table under threads that look up the same new stack at the same moment, as a batch
// of worker threads started together does. Built with ThreadSanitizer in CI (scripts/test).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/id_table.hpp"

namespace trainshim::shim {
namespace {

// Every thread gets the entry and its id, whichever thread inserted it and however far it got: an
// id of 0 is a record with no stack.
TEST(IdTableThreads, ThreadsMeetingANewKeyAtOnceAllGetItsOneId) {
  constexpr int kThreads = 16;
  constexpr int kRounds = 200;
  auto table = std::make_unique<IdTable>(1);
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(round);
    table->reset();
    const uint64_t key = 0x9e3779b97f4a7c15ULL * uint64_t(round + 1);
    std::atomic<int> arrived{0};
    std::vector<uint32_t> ids(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        arrived.fetch_add(1);
        while (arrived.load() < kThreads) std::this_thread::yield();
        const IdTable::Entry* entry = table->find_or_insert(key);
        ids[t] = entry ? table->id_of(*entry) : 0;
      });
    for (std::thread& thread : threads) thread.join();
    ASSERT_NE(ids[0], 0u);
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(ids[t], ids[0]) << "thread " << t;
  }
}

// Keys that collide on a slot take the next ones; tables sharing an id space never share an id.
TEST(IdTableThreads, KeysAndTablesHaveDistinctIds) {
  auto hooks = std::make_unique<IdTable>(1);
  auto sampled = std::make_unique<IdTable>(1 + IdTable::kCapacity);
  const uint64_t a = 5, b = 5 + IdTable::kCapacity;  // the same first slot
  const uint32_t id_a = hooks->id_of(*hooks->find_or_insert(a));
  const uint32_t id_b = hooks->id_of(*hooks->find_or_insert(b));
  EXPECT_NE(id_a, id_b);
  EXPECT_EQ(hooks->id_of(*hooks->find_or_insert(a)), id_a);
  EXPECT_EQ(hooks->id_of(*hooks->find_or_insert(b)), id_b);
  const uint32_t sampled_a = sampled->id_of(*sampled->find_or_insert(a));
  EXPECT_GT(sampled_a, IdTable::kCapacity);
  EXPECT_LE(id_a, IdTable::kCapacity);
  EXPECT_LE(id_b, IdTable::kCapacity);
}

// A full run of probes answers nullptr (that record goes without its stack), never a wrong id.
TEST(IdTableThreads, AFullProbeRunFindsNoEntry) {
  auto table = std::make_unique<IdTable>(1);
  for (uint64_t i = 0; i < 64; ++i) ASSERT_NE(table->find_or_insert(7 + i * IdTable::kCapacity), nullptr);
  EXPECT_EQ(table->find_or_insert(7 + 64 * IdTable::kCapacity), nullptr);
  EXPECT_NE(table->find_or_insert(7 + 3 * IdTable::kCapacity), nullptr);
}

}  // namespace
}  // namespace trainshim::shim
