// libFuzzer harness: the collector's processing of one producer's side records (modules, native
// and Python stacks, strings, setup facts) in ProcessStacks, after the same validation the segment reader
// applies. Input: consecutive SideRecords (1024 bytes each, the last one zero-padded).
//
// Hermetic: a side record names files the collector opens (a module's path for its symbols, a
// Python frame's file for its source line). A fuzzer must not open whatever a mutated path names
// (a device, a FIFO, a huge file), so before ProcessStacks sees a name it is made one of the
// fixtures below or a name inside an empty directory of the harness's own. Separate debug info is
// still looked up by build id under /usr/lib/debug, as the collector does, never over the network.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "database.hpp"
#include "process_stacks.hpp"
#include "trainshim/protocol.hpp"

namespace {

using namespace trainshim;
using namespace trainshim::collector;

// An ELF shared object with debug info, a file that is not ELF, a path that does not exist.
const char* const kModuleFixtures[] = {TRAINSHIM_FUZZ_ELF_FIXTURE, TRAINSHIM_FUZZ_TEXT_FIXTURE,
                                       "/nonexistent/trainshim-fuzz/libmissing.so"};

void set_text(SideRecord& r, size_t offset, const std::string& text) {
  std::memset(r.text + offset, 0, kSideTextBytes - offset);
  std::memcpy(r.text + offset, text.data(), text.size());
}

std::string g_empty_directory;

// Keeps the record's shape (and the fuzzer's choice among the fixtures), changes only the names.
void make_hermetic(SideRecord& r) {
  switch (static_cast<SideKind>(r.kind)) {
    case SideKind::Module: {
      const auto choice = static_cast<uint8_t>(r.text[kModulePathOffset]) % std::size(kModuleFixtures);
      set_text(r, kModulePathOffset, kModuleFixtures[choice]);
      break;
    }
    case SideKind::String: {
      // A path (what the shim records for a Python file) reads the text fixture; any other name,
      // placed in the empty directory, names nothing there ("." and ".." name directories).
      const std::string name(r.text, r.count);
      const std::string hermetic = name.find('/') != std::string::npos
                                       ? std::string(TRAINSHIM_FUZZ_TEXT_FIXTURE)
                                       : (g_empty_directory + "/" + name).substr(0, kSideTextBytes);
      set_text(r, 0, hermetic);
      r.count = uint16_t(hermetic.size());
      break;
    }
    case SideKind::NativeStack:
    case SideKind::PythonStack:
    case SideKind::Facts:  // text the collector parses, never a name it opens
      break;
  }
}

std::string g_database_directory;  // the database's file, kept out of the working directory
std::unique_ptr<Database> g_database;

// The database and SQLite's side files, gone before the next one is made and at exit.
void remove_database() {
  g_database.reset();
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(g_database_directory, ignored))
    std::filesystem::remove(entry.path(), ignored);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // As the collector does (collector/main.cpp): libdw must not fetch debug info over the network.
  unsetenv("DEBUGINFOD_URLS");
  std::string pattern = (std::filesystem::temp_directory_path() / "trainshim-fuzz-XXXXXX").string();
  if (!mkdtemp(pattern.data())) abort();
  g_empty_directory = pattern;
  std::string database_pattern = (std::filesystem::temp_directory_path() / "trainshim-fuzz-db-XXXXXX").string();
  if (!mkdtemp(database_pattern.data())) abort();
  g_database_directory = database_pattern;
  std::atexit([] {
    rmdir(g_empty_directory.c_str());
    remove_database();
    rmdir(g_database_directory.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh database now and then, so that rows from earlier inputs do not pile up.
  static unsigned inputs = 0;
  if (!g_database || ++inputs % 256 == 0) {
    remove_database();
    g_database = std::make_unique<Database>(g_database_directory + "/fuzz.db", "fuzz");
  }
  // No exception is caught: the collector drains side records outside any handler, so one that
  // escapes ProcessStacks stops the whole job's collection.
  const int64_t process = g_database->add_process("fuzz", SegmentHeader{});
  ProcessStacks stacks(*g_database, process);
  std::vector<uint32_t> python_stacks;
  for (size_t at = 0; at < size; at += sizeof(SideRecord)) {
    SideRecord record{};
    std::memcpy(&record, data + at, std::min(sizeof record, size - at));
    if (!validate_side_record(record)) continue;
    make_hermetic(record);
    stacks.add(record);
    if (static_cast<SideKind>(record.kind) == SideKind::PythonStack) python_stacks.push_back(record.id);
  }
  for (uint32_t id : python_stacks) (void)stacks.user_frame(id);
  g_database->commit();
  return 0;
}
