#pragma once
// One producer's side records turned into rows: modules, symbolized native frames and Python
// frames with the text of their source line.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

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

 private:
  std::string text(uint32_t string_id) const;

  Database& database_;
  int64_t process_id_;
  Symbolizer symbolizer_;
  std::unordered_map<uint32_t, std::string> strings_;
  std::unordered_map<uint32_t, std::string> user_frames_;
};

// Line `line` (from 1) of `path` without its end of line, empty when unreadable, not a regular
// file or over kMaxSourceFileBytes; cut at kMaxSourceLineBytes. Files are read once and kept.
std::string source_line(const std::string& path, int line);

}  // namespace trainshim::collector
