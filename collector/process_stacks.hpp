#pragma once
// One producer's side records turned into rows: modules, symbolized native frames and Python
// frames with the text of their source line.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "database.hpp"
#include "symbolizer.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::collector {

class ProcessStacks {
 public:
  ProcessStacks(Database& database, int64_t process_id) : database_(database), process_id_(process_id) {}
  void add(const SideRecord& record);
  // A module a collector that died had recorded (a replacing collector symbolizes with it again).
  void restore_module(const std::string& path, uint64_t base, const std::string& build_id) {
    symbolizer_.add_module({path, base, build_id});
  }
  // A name a collector that died had recorded: a stack published later may refer to it.
  void restore_string(uint32_t id, std::string text) { strings_[id] = std::move(text); }
  // "file:line in function" of the user's innermost frame of a Python stack, empty if unknown.
  std::string user_frame(uint32_t python_stack) const;
  // Lines of Facts records that were not a fact (facts_of), since the last call: malformed records.
  uint64_t take_malformed_facts() { return std::exchange(malformed_facts_, 0); }

 private:
  std::string text(uint32_t string_id) const;

  Database& database_;
  int64_t process_id_;
  Symbolizer symbolizer_;
  std::unordered_map<uint32_t, std::string> strings_;
  std::unordered_map<uint32_t, std::string> user_frames_;
  uint64_t malformed_facts_ = 0;
};

// A Facts record's text as protocol.hpp writes it: "key=value\n" lines. A line is a fact when its
// key is 1..kMostFactKeyBytes printable characters without a space or '=' and not one of the
// census's keys (those come from ProcessSample records only), and its value at most
// kMostFactValueBytes characters, none of them a control character; any other line, and text
// after the last end of line, is counted in `malformed`.
inline constexpr std::size_t kMostFactKeyBytes = 64;
inline constexpr std::size_t kMostFactValueBytes = 1000;
struct Fact {
  std::string key, value;
  bool operator==(const Fact&) const = default;
};
std::vector<Fact> facts_of(std::string_view text, uint64_t& malformed);

// Line `line` (from 1) of `path` without its end of line, empty when unreadable, not a regular
// file or over kMaxSourceFileBytes; cut at kMaxSourceLineBytes. Files are read once and kept.
std::string source_line(const std::string& path, int line);

}  // namespace trainshim::collector
