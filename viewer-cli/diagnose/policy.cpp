#include "diagnose/policy.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <type_traits>

#include "errors.hpp"

namespace trainshim::cli {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string at(const std::string& path, const toml::source_region& where) {
  return where.begin.line ? fmt::format("{}:{}:{}", path, where.begin.line, where.begin.column) : path;
}

// The keys a policy table may hold; any other is refused, so that a misspelt limit never leaves
// the default in force unsaid.
void check_keys(const toml::table& table, const std::string& name, std::initializer_list<std::string_view> known,
                const std::string& path) {
  for (const auto& [key, value] : table) {
    if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
    std::string keys;
    for (const std::string_view k : known) keys += (keys.empty() ? "" : ", ") + std::string(k);
    throw UsageError(fmt::format("{}: unknown key '{}'{}: the keys there are {}", at(path, key.source()), key.str(),
                                 name.empty() ? " at the top level" : " in " + name, keys));
  }
}

template <class T>
void read(const toml::table& table, std::string_view key, T& value, const std::string& path,
          std::set<std::string>* set = nullptr) {
  const toml::node* node = table.get(key);
  if (!node) return;
  const auto number = node->value<T>();
  if (!number)
    throw UsageError(fmt::format("{}: '{}' must be a {}", at(path, node->source()), key,
                                 std::is_integral_v<T> ? "whole number" : "number"));
  value = *number;
  if (set) set->insert(std::string(key));
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
    throw UsageError(fmt::format("{}: cannot read the policy: {}", at(path, e.source()), std::string(e.description())));
  }
  check_keys(doc, "", {"limits", "baseline", "allow"}, path);
  Policy p;
  if (const toml::node* limits_node = doc.get("limits")) {
    const toml::table* limits = limits_node->as_table();
    if (!limits)
      throw UsageError(fmt::format("{}: 'limits' must be a table ([limits])", at(path, limits_node->source())));
    check_keys(*limits, "[limits]",
               {"hidden_syncs_per_step", "blocked_share", "pageable_bytes_per_step", "wait_share", "cause_share",
                "dropped_events"},
               path);
    read(*limits, "hidden_syncs_per_step", p.hidden_syncs_per_step, path, &p.limits_set);
    read(*limits, "blocked_share", p.blocked_share, path, &p.limits_set);
    read(*limits, "pageable_bytes_per_step", p.pageable_bytes_per_step, path, &p.limits_set);
    read(*limits, "wait_share", p.wait_share, path, &p.limits_set);
    read(*limits, "cause_share", p.cause_share, path, &p.limits_set);
    read(*limits, "dropped_events", p.dropped_events, path, &p.limits_set);
  }
  if (const toml::node* baseline_node = doc.get("baseline")) {
    const toml::table* baseline = baseline_node->as_table();
    if (!baseline)
      throw UsageError(fmt::format("{}: 'baseline' must be a table ([baseline])", at(path, baseline_node->source())));
    check_keys(*baseline, "[baseline]", {"calls_per_step_tolerance", "wait_tolerance"}, path);
    read(*baseline, "calls_per_step_tolerance", p.calls_per_step_tolerance, path);
    read(*baseline, "wait_tolerance", p.wait_tolerance, path);
  }
  if (const toml::node* allow_node = doc.get("allow")) {
    const toml::array* allow = allow_node->as_array();
    if (!allow)
      throw UsageError(fmt::format("{}: 'allow' must be a list of [[allow]] entries", at(path, allow_node->source())));
    for (const toml::node& entry : *allow) {
      const toml::table* t = entry.as_table();
      if (t) check_keys(*t, "[[allow]]", {"site", "reason"}, path);
      const auto site = t ? t->get_as<std::string>("site") : nullptr;
      const auto reason = t ? t->get_as<std::string>("reason") : nullptr;
      if (!site || !reason)
        throw UsageError(fmt::format("{}: every [[allow]] entry needs site = \"file:line\" or a function name, "
                                     "and reason = \"...\"",
                                     at(path, entry.source())));
      p.allow.push_back({site->get(), reason->get()});
    }
  }
  return p;
}

}  // namespace trainshim::cli
