// The lists declared once (counters.def, call_kinds.def) and what is expanded from them: the
// database's columns and lookup tables, the report's and the trace's JSON keys, the CLI's parsing.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "analyse/syncs.hpp"
#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "render/export.hpp"
#include "render/report_json.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"
#include "trainshim/counters.hpp"
#include "trainshim/schema.hpp"

namespace trainshim::cli {
namespace {

using Json = nlohmann::ordered_json;

class VocabularyTest : public test::TempDirTest {
 protected:
  const std::string path_ = dir_ + "/trainshim-vocab.db";
};

// Counter i of counters.def holds 100 + i: each key must show its own column's value.
int64_t planted(std::size_t i) { return 100 + int64_t(i); }

TEST_F(VocabularyTest, EveryCounterHasItsProcessesColumnAndItsJsonKeys) {
  {
    collector::Database db(path_, "vocab");
    const int64_t p = db.add_process("seg-1", *test::header_for(0, 1, "node"));
    collector::Database::ProcessCounters counters{.events = 0, .ended = true};
    std::size_t i = 0;
#define TS_COUNTER(kind, column, json_key, words, meaning) counters.column = uint64_t(planted(i++));
#include "trainshim/counters.def"
    db.update_process(p, counters);
    db.commit();
  }
  RunDatabase run(path_);
  const Json report = render_json(load_report(run));
  std::ostringstream trace_text;
  export_chrome_trace(run, trace_text);
  const Json trace = Json::parse(trace_text.str());
  std::map<std::string, Json> trace_counters;
  for (const Json& e : trace["traceEvents"])
    if (e["ph"] == "C") trace_counters[e["name"].get<std::string>()] = e["args"];
  ASSERT_EQ(trace_counters.size(), 2u);

  int64_t lost = 0;
  std::size_t lost_keys = 0, untimed_keys = 0, gpu_keys = 0, sampler_keys = 0;
  for (std::size_t i = 0; i < kCounters.size(); ++i) {
    const CounterInfo& c = kCounters[i];
    SCOPED_TRACE(std::string(c.column));
    bool column = false;
    for (const schema::Column& s : schema::kColumns)
      column = column || (s.table == "processes" && s.name == c.column && s.meaning == c.meaning);
    EXPECT_TRUE(column) << "no processes column with the counter's name and meaning";
    Statement q(run, ("SELECT " + std::string(c.column) + " FROM processes").c_str());
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.integer(0), planted(i));
    const std::string key(c.json_key);
    if (c.kind == CounterKind::Lost) {
      ++lost_keys;
      lost += planted(i);
      EXPECT_EQ(report["ranks"][0]["lost"][key], planted(i));
      EXPECT_EQ(trace_counters["dropped events"][key], planted(i));
    } else if (c.kind == CounterKind::Gpu || c.kind == CounterKind::Sampler) {
      // Not losses of calls: neither in `lost` nor in the trace's counters.
      ++(c.kind == CounterKind::Gpu ? gpu_keys : sampler_keys);
      EXPECT_FALSE(report["ranks"][0]["lost"].contains(key));
    } else {
      ++untimed_keys;
      EXPECT_EQ(report["collective_waits"]["untimed"][key], planted(i));
      EXPECT_EQ(trace_counters["untimed collectives"][key], planted(i));
    }
  }
  // No key beyond the list's (the waits add one count of their own).
  EXPECT_EQ(report["ranks"][0]["lost"].size(), lost_keys);
  EXPECT_EQ(trace_counters["dropped events"].size(), lost_keys);
  EXPECT_EQ(report["collective_waits"]["untimed"].size(), untimed_keys + 1);
  EXPECT_EQ(trace_counters["untimed collectives"].size(), untimed_keys);
  EXPECT_EQ(report["ranks"][0]["dropped_events"], lost);
  EXPECT_EQ(lost_keys, 5u);
  EXPECT_EQ(untimed_keys, 2u);
  EXPECT_EQ(gpu_keys, 2u);
  EXPECT_EQ(sampler_keys, 2u);
}

// The names that differ between the database and the JSON, spelled out: a rename on either side
// must be deliberate.
TEST(Counters, DatabaseColumnsAndJsonKeys) {
  std::vector<std::string> pairs;
  for (const CounterInfo& c : kCounters) pairs.push_back(std::string(c.column) + "=" + std::string(c.json_key));
  EXPECT_EQ(pairs, (std::vector<std::string>{
                       "dropped_ring_full=ring_full", "dropped_not_ready=not_ready", "lost_unpublished=unpublished",
                       "malformed=malformed", "dropped_side_full=side_ring_full", "untimed_capturing=capturing",
                       "untimed_no_event=no_event", "gpu_records_dropped=records_dropped",
                       "gpu_records_not_kept=records_not_kept", "samples_torn=torn", "samples_not_kept=not_kept"}));
}

// --- call_kinds.def: names, parsing, the database's lookup tables ------------------------------

TEST(CallKinds, EveryNameParsesBackToItsValueAndNoOtherNameParses) {
  for (uint8_t i = 0; i < kApiClassCount; ++i) EXPECT_EQ(api_class_named(api_class_name(ApiClass(i))), ApiClass(i));
  for (uint8_t i = 0; i < kDirectionCount; ++i) EXPECT_EQ(direction_named(direction_name(Direction(i))), Direction(i));
  for (uint8_t i = 0; i < kHostMemoryCount; ++i)
    EXPECT_EQ(host_memory_named(host_memory_name(HostMemory(i))), HostMemory(i));
  EXPECT_EQ(api_class_named("invalid"), std::nullopt);
  EXPECT_EQ(direction_named("H2D"), std::nullopt);
  EXPECT_EQ(host_memory_named(""), std::nullopt);
  EXPECT_EQ(api_class_name(ApiClass::CollectiveTiming), "collective_timing");
  EXPECT_EQ(direction_name(Direction::DeviceToHost), "d2h");
  EXPECT_EQ(host_memory_name(HostMemory::Pinned), "pinned");
}

TEST_F(VocabularyTest, TheDatabaseTablesHoldTheListsAndTheCliReadsThemBackAsEnums) {
  { collector::Database db(path_, "vocab"); }
  RunDatabase run(path_);
  const Vocabulary& words = run.vocabulary();
  ASSERT_EQ(words.apis.size(), kApiCount);
  for (std::size_t i = 0; i < kApiCount; ++i) {
    EXPECT_EQ(words.api(int64_t(i)).name, kApis[i].name);
    EXPECT_EQ(words.api(int64_t(i)).api_class, kApis[i].api_class) << kApis[i].name;
  }
  ASSERT_EQ(words.directions.size(), kDirectionCount);
  for (uint8_t i = 0; i < kDirectionCount; ++i) EXPECT_EQ(words.direction(i), Direction(i));
  ASSERT_EQ(words.host_memories.size(), kHostMemoryCount);
  for (uint8_t i = 0; i < kHostMemoryCount; ++i) EXPECT_EQ(words.host_memory(i), HostMemory(i));
  // Ids the tables do not hold.
  EXPECT_EQ(words.api(int64_t(kApiCount)).name, "unknown");
  EXPECT_EQ(words.api(-1).api_class, std::nullopt);
  EXPECT_EQ(words.direction(kDirectionCount), Direction::None);
  EXPECT_EQ(words.host_memory(99), HostMemory::Unknown);
  Statement q(run, "SELECT name FROM host_memories ORDER BY id");
  std::vector<std::string> names;
  while (q.step()) names.push_back(q.text(0));
  EXPECT_EQ(names, (std::vector<std::string>{"unknown", "pinned", "pageable", "device"}));
}

TEST(CallKinds, ClassListsForSqlComeFromTheNames) {
  EXPECT_EQ(api_classes_sql(waits_or_polls), "('sync', 'free', 'poll')");
  EXPECT_EQ(api_classes_sql(may_wait_or_poll), "('copy', 'sync', 'free', 'poll')");
  EXPECT_EQ(api_classes_sql(waits_by_class), "('sync', 'free')");
  EXPECT_EQ(api_classes_sql(ApiClass::GroupEnd), "('group_end')");
}

// --- is_host_sync: what a host sync is ------------------------------------------------------------

TEST(IsHostSync, EveryClassButCopiesIsDecidedByItsClass) {
  for (uint8_t i = 0; i < kApiClassCount; ++i) {
    const ApiClass c = ApiClass(i);
    if (c == ApiClass::Copy) continue;
    const bool waits = c == ApiClass::Sync || c == ApiClass::Free;
    for (uint8_t d = 0; d < kDirectionCount; ++d)
      for (const bool synchronous : {false, true})
        EXPECT_EQ(is_host_sync(c, Direction(d), HostMemory::Pageable, synchronous), waits) << api_class_name(c);
    EXPECT_EQ(can_host_sync(c), waits) << api_class_name(c);
  }
  EXPECT_TRUE(can_host_sync(ApiClass::Copy));
  // cudaFree(nullptr) only creates the context; a sync waits whatever its object.
  EXPECT_FALSE(is_host_sync(ApiClass::Free, Direction::None, HostMemory::Unknown, false, true));
  EXPECT_TRUE(is_host_sync(ApiClass::Sync, Direction::None, HostMemory::Unknown, false, true));
  EXPECT_FALSE(is_host_sync(ApiClass::Poll, Direction::None, HostMemory::Unknown, false));
}

TEST(IsHostSync, CopiesWaitBySynchronyDirectionAndHostMemory) {
  // cudaMemcpyAsync H2D from pageable memory returns once staged: not a sync (a pageable site).
  EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::HostToDevice, HostMemory::Pageable, false));
  // Into pageable memory an asynchronous D2H copy waits; into pinned memory it does not.
  EXPECT_TRUE(is_host_sync(ApiClass::Copy, Direction::DeviceToHost, HostMemory::Pageable, false));
  EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::DeviceToHost, HostMemory::Pinned, false));
  EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::HostToDevice, HostMemory::Pinned, false));
  // Synchronous cudaMemcpy: every direction with a host side, pinned or not.
  for (const HostMemory m : {HostMemory::Pinned, HostMemory::Pageable, HostMemory::Unknown}) {
    EXPECT_TRUE(is_host_sync(ApiClass::Copy, Direction::DeviceToHost, m, true));
    EXPECT_TRUE(is_host_sync(ApiClass::Copy, Direction::HostToDevice, m, true));
    EXPECT_TRUE(is_host_sync(ApiClass::Copy, Direction::HostToHost, m, false));
  }
  for (const bool synchronous : {false, true}) {
    EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::DeviceToDevice, HostMemory::Device, synchronous));
    EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::Peer, HostMemory::Device, synchronous));
    EXPECT_FALSE(is_host_sync(ApiClass::Copy, Direction::None, HostMemory::Unknown, synchronous));
  }
  EXPECT_TRUE(is_synchronous_copy(Api::cudaMemcpy));
  EXPECT_TRUE(is_synchronous_copy(Api::cudaMemcpy2D));
  EXPECT_FALSE(is_synchronous_copy(Api::cudaMemcpyAsync));
  EXPECT_FALSE(is_synchronous_copy(Api::cudaMemcpy2DAsync_ptsz));
  EXPECT_FALSE(is_synchronous_copy(Api::cudaStreamSynchronize));
}

// The shim takes stacks of every host sync, every collective and every pageable copy.
TEST(IsHostSync, StacksAreTakenOfHostSyncsCollectivesAndPageableCopies) {
  EXPECT_TRUE(captures_stacks(ApiClass::Copy, Direction::HostToDevice, HostMemory::Pageable, false, false));
  EXPECT_TRUE(captures_stacks(ApiClass::Copy, Direction::DeviceToHost, HostMemory::Pinned, true, false));
  EXPECT_FALSE(captures_stacks(ApiClass::Copy, Direction::HostToDevice, HostMemory::Pinned, false, false));
  EXPECT_FALSE(captures_stacks(ApiClass::Copy, Direction::DeviceToDevice, HostMemory::Device, true, false));
  EXPECT_TRUE(captures_stacks(ApiClass::Collective, Direction::None, HostMemory::Unknown, false, false));
  EXPECT_TRUE(captures_stacks(ApiClass::Sync, Direction::None, HostMemory::Unknown, false, true));
  EXPECT_TRUE(captures_stacks(ApiClass::Free, Direction::None, HostMemory::Unknown, false, false));
  EXPECT_FALSE(captures_stacks(ApiClass::Free, Direction::None, HostMemory::Unknown, false, true));
  EXPECT_FALSE(captures_stacks(ApiClass::PinnedAlloc, Direction::None, HostMemory::Unknown, false, false));
}

// --- SiteKind: each site says what it is --------------------------------------------------------

TEST_F(VocabularyTest, EachKindOfSiteCarriesItsKind) {
  int64_t p = 0;
  {
    collector::Database db(path_, "vocab");
    p = db.add_process("seg-1", *test::header_for(0, 1, "node"));
    // A program's own frame calls cudaDeviceSynchronize: an explicit sync.
    db.add_native_frame(p, 1, 0, {0x1000, "/opt/app/train", "main", "train.cpp", 12});
    test::Records records(db);
    uint64_t clock = 1'000'000;
    auto add = [&](Api api, Direction d, HostMemory m, uint32_t native_stack = 0) {
      EventRecord r{};
      r.api = uint16_t(api);
      r.bytes = 64;
      r.direction = uint8_t(d);
      r.host_memory = uint8_t(m);
      r.native_stack = native_stack;
      clock += 1000;
      records.add(p, r, clock, clock + 100);
    };
    add(Api::cudaStreamSynchronize, Direction::None, HostMemory::Unknown);
    add(Api::cudaDeviceSynchronize, Direction::None, HostMemory::Unknown, 1);
    add(Api::cudaMemcpyAsync, Direction::HostToDevice, HostMemory::Pageable);
    add(Api::cudaMemcpyAsync, Direction::DeviceToHost, HostMemory::Pageable);
    add(Api::cudaStreamQuery, Direction::None, HostMemory::Unknown);
    records.store();
    db.commit();
  }
  RunDatabase run(path_);
  const RankSyncs rs = load_syncs(run, p, "", {});
  // The unclassified stream sync and the D2H copy into pageable memory.
  ASSERT_EQ(rs.hidden.size(), 2u);
  for (const SyncSite& s : rs.hidden) EXPECT_EQ(s.kind, SiteKind::HiddenSync) << s.classification.operation;
  ASSERT_EQ(rs.explicit_.size(), 1u);
  EXPECT_EQ(rs.explicit_[0].kind, SiteKind::ExplicitSync);
  EXPECT_EQ(rs.explicit_[0].classification.operation, "cudaDeviceSynchronize()");
  ASSERT_EQ(rs.pageable_copies.size(), 2u);
  std::map<Direction, std::string> pageable;
  for (const SyncSite& s : rs.pageable_copies) {
    EXPECT_EQ(s.kind, SiteKind::PageableCopy);
    pageable[s.copy_direction] = s.classification.operation;
  }
  EXPECT_EQ(pageable, (std::map<Direction, std::string>{{Direction::HostToDevice, "pageable H2D copy"},
                                                        {Direction::DeviceToHost, "pageable D2H copy"}}));
  ASSERT_EQ(rs.polls.size(), 1u);
  EXPECT_EQ(rs.polls[0].kind, SiteKind::Poll);
  EXPECT_EQ(rs.polls[0].classification.operation, "cudaStreamQuery()");
}

// A D2H copy into pageable memory and the stream sync right after it, both made by one native
// frame of a library no rule knows (a C++ extension, a renamed build): one site, named after the
// copy, counted once per wait. A sync that follows a copy from another frame stays a site of its
// own.
TEST_F(VocabularyTest, ABlockingCopyAndTheSyncItsFrameMakesAfterItAreOneSite) {
  int64_t p = 0;
  {
    collector::Database db(path_, "vocab");
    p = db.add_process("seg-1", *test::header_for(0, 1, "node"));
    db.add_native_frame(p, 1, 0, {0x1000, "/opt/ext/libreadback.so", "readback::to_host(at::Tensor const&)", "", 0});
    db.add_native_frame(p, 2, 0, {0x2000, "/opt/ext/libreadback.so", "readback::wait_all()", "", 0});
    db.add_python_frame(p, 1, 0, "/src/train.py", "train_step", 57, "value = readback.to_host(t)");
    test::Records records(db);
    uint64_t clock = 1'000'000;
    auto add = [&](Api api, Direction d, HostMemory m, uint32_t native_stack) {
      EventRecord r{};
      r.api = uint16_t(api);
      r.bytes = d == Direction::None ? 0 : 64;
      r.direction = uint8_t(d);
      r.host_memory = uint8_t(m);
      r.native_stack = native_stack;
      r.python_stack = 1;
      clock += 1000;
      records.add(p, r, clock, clock + 100);
    };
    for (int step = 0; step < 3; ++step) {
      add(Api::cudaMemcpyAsync, Direction::DeviceToHost, HostMemory::Pageable, 1);
      add(Api::cudaStreamSynchronize, Direction::None, HostMemory::Unknown, 1);
    }
    add(Api::cudaMemcpyAsync, Direction::DeviceToHost, HostMemory::Pageable, 1);
    add(Api::cudaStreamSynchronize, Direction::None, HostMemory::Unknown, 2);
    records.store();
    db.commit();
  }
  RunDatabase run(path_);
  const RankSyncs rs = load_syncs(run, p, "", {});
  std::map<std::string, int64_t> calls;
  for (const SyncSite& s : rs.hidden) {
    EXPECT_EQ(s.line, 57) << s.classification.operation;
    calls[s.classification.operation] += s.calls;
  }
  EXPECT_EQ(calls, (std::map<std::string, int64_t>{{"blocking D2H copy into pageable memory", 3},
                                                   {"cudaStreamSynchronize() in libreadback.so", 1}}));
}

}  // namespace
}  // namespace trainshim::cli
