#include "policy.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>

#include "errors.hpp"

namespace trainshim::cli {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <class T>
T get_or(const toml::table& table, const char* key, T fallback, const std::string& path) {
  const toml::node* node = table.get(key);
  if (!node) return fallback;
  if (auto value = node->value<T>()) return *value;
  throw UsageError(fmt::format("{}: '{}' must be a number", path, key));
}

}  // namespace

bool allowed(const SyncSite& s, const Policy& policy) {
  for (const AllowedSite& a : policy.allow) {
    const auto colon = a.site.rfind(':');
    if (colon == std::string::npos) {
      if (s.function == a.site) return true;
      continue;
    }
    const std::string file = a.site.substr(0, colon);
    const std::string line = a.site.substr(colon + 1);
    if ((s.file == file || ends_with(s.file, "/" + file)) && line == std::to_string(s.line)) return true;
  }
  return false;
}

Policy load_policy(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw UsageError(fmt::format("{}:{}:{}: cannot read the policy: {}", path, where.line, where.column,
                                 std::string(e.description())));
  }
  Policy p;
  if (const toml::table* limits = doc["limits"].as_table()) {
    p.hidden_syncs_per_step = get_or(*limits, "hidden_syncs_per_step", p.hidden_syncs_per_step, path);
    p.blocked_share = get_or(*limits, "blocked_share", p.blocked_share, path);
    p.pageable_bytes_per_step = get_or(*limits, "pageable_bytes_per_step", p.pageable_bytes_per_step, path);
    p.wait_share = get_or(*limits, "wait_share", p.wait_share, path);
    p.dropped_events = get_or<int64_t>(*limits, "dropped_events", p.dropped_events, path);
  }
  if (const toml::table* baseline = doc["baseline"].as_table()) {
    p.calls_per_step_tolerance = get_or(*baseline, "calls_per_step_tolerance", p.calls_per_step_tolerance, path);
    p.wait_tolerance = get_or(*baseline, "wait_tolerance", p.wait_tolerance, path);
  }
  if (const toml::array* allow = doc["allow"].as_array()) {
    for (const toml::node& entry : *allow) {
      const toml::table* t = entry.as_table();
      const auto site = t ? t->get_as<std::string>("site") : nullptr;
      const auto reason = t ? t->get_as<std::string>("reason") : nullptr;
      if (!site || !reason)
        throw UsageError(fmt::format("{}: every [[allow]] entry needs site = \"file:line\" or a function name, "
                                     "and reason = \"...\"",
                                     path));
      p.allow.push_back({site->get(), reason->get()});
    }
  }
  return p;
}

}  // namespace trainshim::cli
