#include "process_stacks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "named_file.hpp"
#include "trainshim/python_files.hpp"

namespace trainshim::collector {

std::string source_line(const std::string& path, int line) {
  static std::mutex lock;
  static std::unordered_map<std::string, std::vector<std::string>> files;
  std::lock_guard guard(lock);
  auto [it, fresh] = files.try_emplace(path);
  if (fresh) {
    // A file too large, or not a regular file, is not worth keeping: its lines are simply not shown.
    const auto text = read_regular_file(path, kMaxSourceFileBytes);
    for (std::size_t begin = 0; text && begin < text->size();) {
      const std::size_t end = std::min(text->find('\n', begin), text->size());
      it->second.push_back(text->substr(begin, std::min(end - begin, kMaxSourceLineBytes)));
      begin = end + 1;
    }
  }
  if (line < 1 || std::size_t(line) > it->second.size()) return {};
  const std::string& raw = it->second[std::size_t(line) - 1];
  const auto first = raw.find_first_not_of(" \t");
  const auto last = raw.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : raw.substr(first, last - first + 1);
}

namespace {
bool census_key(std::string_view key) {
  return std::find(std::begin(kCensusKeys), std::end(kCensusKeys), key) != std::end(kCensusKeys);
}
}  // namespace

std::vector<Fact> facts_of(std::string_view text, uint64_t& malformed) {
  std::vector<Fact> facts;
  const auto key_character = [](char c) { return c > ' ' && c < 0x7f && c != '='; };
  const auto value_character = [](char c) { return static_cast<unsigned char>(c) >= ' ' && c != 0x7f; };
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      ++malformed;  // a line without its end: cut, or garbage
      break;
    }
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    const std::size_t equals = line.find('=');
    const std::string_view key = line.substr(0, equals);
    const std::string_view value = equals == std::string_view::npos ? std::string_view() : line.substr(equals + 1);
    if (equals == std::string_view::npos || key.empty() || key.size() > kMostFactKeyBytes ||
        !std::all_of(key.begin(), key.end(), key_character) || census_key(key) || value.size() > kMostFactValueBytes ||
        !std::all_of(value.begin(), value.end(), value_character)) {
      ++malformed;
      continue;
    }
    facts.push_back({std::string(key), std::string(value)});
  }
  return facts;
}

std::string ProcessStacks::user_frame(uint32_t python_stack) const {
  const auto it = user_frames_.find(python_stack);
  return it == user_frames_.end() ? std::string() : it->second;
}

std::string ProcessStacks::text(uint32_t string_id) const {
  const auto it = strings_.find(string_id);
  return it == strings_.end() ? std::string("?") : it->second;
}

void ProcessStacks::add(const SideRecord& r) {
  switch (static_cast<SideKind>(r.kind)) {
    case SideKind::Module: {
      const std::string build_id(r.text, r.count);
      const std::string path(r.text + kModulePathOffset,
                             strnlen(r.text + kModulePathOffset, kSideTextBytes - kModulePathOffset));
      symbolizer_.add_module({path, r.value, build_id});
      database_.add_module(process_id_, r.id, path, r.value, build_id);
      break;
    }
    case SideKind::String:
      strings_[r.id] = std::string(r.text, r.count);
      database_.add_python_string(process_id_, r.id, strings_[r.id]);
      break;
    case SideKind::NativeStack:
      for (int depth = 0; depth < r.count; ++depth) {
        const Symbol s = symbolizer_.resolve(r.native[depth]);
        database_.add_native_frame(process_id_, r.id, depth, {r.native[depth], s.module, s.function, s.file, s.line});
      }
      break;
    case SideKind::PythonStack:
      database_.add_python_stack(process_id_, r.id, (r.value & kPythonStackBorrowed) != 0, uint32_t(r.value >> 32));
      for (int depth = 0; depth < r.count; ++depth) {
        const PythonFrameRecord& f = r.python[depth];
        const std::string file = text(f.file);
        database_.add_python_frame(process_id_, r.id, depth, file, text(f.function), f.line, source_line(file, f.line));
        if (!user_frames_.count(r.id) && (!is_library_python_frame(file, text(f.function)) || depth + 1 == r.count))
          user_frames_[r.id] = fmt::format("{}:{} in {}", file, f.line, text(f.function));
      }
      break;
    case SideKind::Facts:
      for (const Fact& fact : facts_of(std::string_view(r.text, r.count), malformed_facts_))
        database_.set_fact(process_id_, fact.key, fact.value);
      break;
  }
}

}  // namespace trainshim::collector
