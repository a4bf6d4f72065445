// The documentation against the code it describes: the keys of the JSON documents, the list of
// interposed functions, the loss counters, the environment variables, each command's flags, the
// source files and the links the pages name. Each documented list is a Markdown table after a
// marker line (<!-- keys:NAME -->, <!-- list:NAME -->); its first column holds the names in
// backticks. A key is written as its path: `ranks[].copies[].bytes` (`[]`: an element of an array),
// and `{a,b}.x` stands for `a.x` and `b.x`.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands/commands.hpp"
#include "diagnose/audit.hpp"
#include "diagnose/diff.hpp"
#include "diagnose/report_model.hpp"
#include "render/audit_render.hpp"
#include "render/diff_render.hpp"
#include "render/report_json.hpp"
#include "trainshim/api.hpp"
#include "trainshim/counters.hpp"

namespace trainshim::cli {
namespace {

using Json = nlohmann::ordered_json;
using Names = std::set<std::string>;

const std::string kSourceDir = TRAINSHIM_SOURCE_DIR;

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `{a,b}.x` -> `a.x`, `b.x`; several groups expand one after the other.
std::vector<std::string> expand_braces(const std::string& pattern) {
  const auto open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const auto close = pattern.find('}', open);
  if (close == std::string::npos) return {pattern};
  std::vector<std::string> out;
  std::stringstream choices(pattern.substr(open + 1, close - open - 1));
  for (std::string choice; std::getline(choices, choice, ',');)
    for (const std::string& rest : expand_braces(pattern.substr(close + 1)))
      out.push_back(pattern.substr(0, open) + choice + rest);
  return out;
}

using Row = std::vector<std::string>;

// The cells of each row of the table that follows `marker` in `text`, header and separator left
// out; `\|` inside a cell is a character, not a column. Records the failure and returns nothing
// when the marker or its table is missing.
std::vector<Row> table_rows(const std::string& text, const std::string& marker, const std::string& where) {
  std::vector<Row> rows;
  const auto at = text.find(marker);
  if (at == std::string::npos) {
    ADD_FAILURE() << where << " lacks the line " << marker;
    return rows;
  }
  std::stringstream lines(text.substr(at + marker.size()));
  std::string line;
  bool in_table = false;
  int seen = 0;
  while (std::getline(lines, line)) {
    if (line.empty() && !in_table) continue;
    if (line.rfind('|', 0) != 0) break;
    in_table = true;
    if (seen++ < 2) continue;  // the header and the separator
    Row cells(1);
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|' && line[i - 1] != '\\') cells.emplace_back();
      else cells.back() += line[i];
    }
    if (cells.back().find_first_not_of(' ') == std::string::npos) cells.pop_back();  // after the last |
    rows.push_back(cells);
  }
  if (!in_table) ADD_FAILURE() << where << ": no table after " << marker;
  return rows;
}

// The names in backticks in `cell`, braces expanded.
Names quoted_names(const std::string& cell) {
  Names names;
  static const std::regex quoted("`([^`]+)`");
  for (std::sregex_iterator it(cell.begin(), cell.end(), quoted), last; it != last; ++it)
    for (const std::string& name : expand_braces((*it)[1])) names.insert(name);
  return names;
}

// The names in backticks in the first column of the table that follows `marker` in `text`.
Names first_column(const std::string& text, const std::string& marker, const std::string& where) {
  Names names;
  for (const Row& row : table_rows(text, marker, where)) names.merge(quoted_names(row.front()));
  return names;
}

Names documented(const std::string& doc, const std::string& marker) {
  return first_column(file_text(kSourceDir + "/" + doc), marker, doc);
}

// Every key path of `value`, containers included; array elements as `[]`.
void collect_paths(const Json& value, const std::string& path, Names& out) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      const std::string child_path = path.empty() ? key : path + "." + key;
      out.insert(child_path);
      collect_paths(child, child_path, out);
    }
  } else if (value.is_array()) {
    for (const Json& element : value) collect_paths(element, path + "[]", out);
  }
}

Names paths_of(const Json& document) {
  Names out;
  collect_paths(document, "", out);
  return out;
}

Names minus(const Names& a, const Names& b) {
  Names out;
  for (const std::string& name : a)
    if (!b.count(name)) out.insert(name);
  return out;
}

std::string listed(const Names& names) {
  std::string out;
  for (const std::string& name : names) out += "\n  " + name;
  return out;
}

void expect_same(const Names& code, const Names& docs, const std::string& what, const std::string& doc) {
  EXPECT_EQ(minus(code, docs), Names{}) << what << " missing in " << doc << ":" << listed(minus(code, docs));
  EXPECT_EQ(minus(docs, code), Names{}) << what << " in " << doc
                                        << " that the code does not have:" << listed(minus(docs, code));
}

// A report with one of everything, so that every key the renderers can write is written (and no
// optional object is null).
Report full_report() {
  SyncSite site;
  site.classification = {"Tensor.item()",        SyncKind::Hidden, "reads a value", "log less often",
                         "at::_ops::item::call", "item",           "item"};
  site.file = "/src/train.py";
  site.function = "train_step";
  site.source = "loss_val = loss.item()";
  site.line = 57;
  site.python = {{"/src/train.py", "train_step", "loss_val = loss.item()", 57}};
  site.native = {{"/usr/lib/libtorch_cpu.so", "at::_ops::item::call(at::Tensor const&)", "", 0}};
  site.calls = 100;
  site.blocked_ns = 5'000'000;
  site.bubble_ns = 500'000'000;
  site.bubble_calls = 100;
  site.bubble_on_gpu = true;
  SyncSite upload = site;
  upload.classification = {"pageable H2D copy", SyncKind::Hidden, "", "", "", "pageable_copy", "pageable_copy/H2D"};
  upload.bytes = 1 << 20;
  upload.kind = SiteKind::PageableCopy;
  upload.copy_direction = Direction::HostToDevice;

  ProcessReport p;
  p.rank = 0;
  p.local_rank = 0;
  p.world_size = 2;
  p.pid = 4242;
  p.host = "node1";
  p.command = "python train.py";
  p.python_version = "3.11";
  p.python_stacks_unavailable = "no reason";
  p.events = 1000;
  p.copies = {{Direction::HostToDevice, HostMemory::Pageable, 100, 1 << 20, 1'000'000}};
  p.api_waits = {{"cudaStreamSynchronize", 100, 5'000'000}};
  p.collectives = {{"all_reduce", 100, 4096, 2'000'000}};
  p.lost.dropped_ring_full = 1;
  RankSyncs& rs = p.sync_sites;
  rs.steps = {100, "one step per call of the most frequent sync site", 10'000'000, {}};
  rs.span_ns = 1'000'000'000;
  rs.hidden = {site};
  rs.explicit_ = {site};
  rs.pageable_copies = {upload};
  rs.polls = {site};
  GpuTimelineReport& gpu = p.gpu;
  gpu.timeline = "on";
  gpu.covered_steps = 10;
  gpu.covered_ns = 100'000'000;
  gpu.busy_ns = 60'000'000;
  gpu.idle_ns = 40'000'000;
  gpu.idle_by_cause_ns[int(IdleCause::DataLoading)] = 40'000'000;
  gpu.gap_threshold_ns = 1'000'000;
  gpu.gaps = {{3, 1'000'000, 4'000'000, IdleCause::DataLoading, "/src/train.py:40 in train_step"}};
  gpu.gaps_above_threshold = 10;
  gpu.gap_groups = {
      {IdleCause::DataLoading, "/src/train.py:40 in train_step", 10, 40'000'000, 4'000'000, 4'000'000, 10, 0, 9}};
  gpu.kernels.busy_ns = 60'000'000;
  gpu.kernels.top = {{"ampere_sgemm_128x64_tn", 10, 30'000'000, 0.5, {true, KernelPrecision::Fp32}}};
  p.host_report.sampler = "on";
  p.host_report.sample_hz = 50;
  p.host_report.samples = 500;
  p.host_report.input_wait = InputWait{100, 40, 30, 10, 100'000'000, "/src/train.py:40 in train"};
  p.step_breakdown = StepBreakdown{true,
                                   10,
                                   1,
                                   10'000'000,
                                   {{StepPart::Sync, "/src/train.py:57 in train_step", -1, 4'000'000, 0.4},
                                    {StepPart::WaitingForStraggler, "", 1, 6'000'000, 0.6}}};

  Report r;
  r.job = "job";
  r.database = "run.db";
  r.processes = {p};
  ProcessReport p1 = p;
  p1.rank = 1;
  p1.pid = 4243;
  // Rank 0, the straggler, waits for no one: its 6 ms are on its host.
  r.processes[0].step_breakdown->parts[1] = {StepPart::LaunchBound, "", -1, 6'000'000, 0.6};
  r.processes.push_back(p1);
  r.total_copies = p.copies;
  r.total_syncs = p.api_waits;
  r.total_collectives = p.collectives;
  r.waits.analysis.matched = 100;
  r.waits.analysis.ranks = {RankWaits{0, 100, 50'000'000, 90, 45'000'000}, RankWaits{1, 100, 1'000'000, 10, 100'000}};
  r.waits.analysis.straggler = 0;
  r.waits.straggler_host = {{"/src/train.py", "load", 35, 1.0}};
  r.waits.captured = {{0x1234, 3, 2}};
  r.waits.straggler_doing = StragglerDoing{0, "main", "load", "/src/train.py", 35, 0.9, "S", 230, 50};
  r.hangs = {{"e28f86238006191a",
              "ncclAllReduce",
              "ranks 0 waiting",
              4,
              312'000'000'000,
              {0},
              {1},
              schema::HangKind::Collective,
              "rank 1 (pid 4243) thread 4243 sleeping in futex for 312.0 s"}};
  r.setup = {{0, 4242, SetupItemKind::NumaAffinity, "affinity CPUs 0-63", "taskset/numactl to CPUs 0-31", false}};
  r.findings = {{FindingKind::HiddenSync, 0, 100, 0, 5'000'000, "rank 0 waits", {"log less often"}, {}, ""},
                {FindingKind::Hang,
                 1,
                 0,
                 0,
                 312'000'000'000,
                 "ranks 0 waiting",
                 {"look"},
                 schema::HangKind::Collective,
                 "rank 1 ..."}};
  r.diagnosis = diagnose(r);
  return r;
}

TEST(Docs, ReportJsonKeysAreTheDocumentedOnes) {
  expect_same(paths_of(render_json(full_report())), documented("docs/formats.md", "<!-- keys:report -->"),
              "report keys", "docs/formats.md");
}

TEST(Docs, DiffJsonKeysAreTheDocumentedOnes) {
  const Report before = full_report();
  Report after = full_report();
  after.processes[0].sync_sites.hidden[0].calls = 300;  // every site and rank present in both runs
  expect_same(paths_of(render_diff_json(diff_reports(before, after))),
              documented("docs/formats.md", "<!-- keys:diff -->"), "diff keys", "docs/formats.md");
}

TEST(Docs, AuditAndBaselineJsonKeysAreTheDocumentedOnes) {
  const Report report = full_report();
  const nlohmann::json baseline = baseline_of(report);
  Policy strict;
  strict.hidden_syncs_per_step = 0;  // a violation, so that its keys are written
  const Json audit_json = render_audit_json(audit(report, strict, nullptr));
  ASSERT_FALSE(audit_json.at("passed").get<bool>());
  expect_same(paths_of(audit_json), documented("docs/formats.md", "<!-- keys:audit -->"), "audit keys",
              "docs/formats.md");
  expect_same(paths_of(Json(baseline)), documented("docs/formats.md", "<!-- keys:baseline -->"), "baseline keys",
              "docs/formats.md");
}

TEST(Docs, TheAuditRulesAreTheDocumentedOnes) {
  const Report report = full_report();
  const nlohmann::json baseline = baseline_of(report);
  Names rules;
  for (const nlohmann::json* against : {static_cast<const nlohmann::json*>(nullptr), &baseline})
    for (const RuleResult& rule : audit(report, Policy{}, against).rules) rules.insert(rule.rule);
  expect_same(rules, documented("docs/formats.md", "<!-- list:audit-rules -->"), "audit rules", "docs/formats.md");
}

TEST(Docs, TheSetupItemsAreTheDocumentedOnes) {
  Names items;
  for (const SetupItemInfo& item : kSetupItems) items.insert(std::string(item.name));
  expect_same(items, documented("docs/findings.md", "<!-- list:setup-items -->"), "setup items", "docs/findings.md");
}

// The kinds in the cell of `findings[].kind` (docs/formats.md) are finding_kinds.def's.
TEST(Docs, TheFindingKindsAreTheDocumentedOnes) {
  Names kinds;
#define TS_FINDING(value, name) kinds.insert(FindingKind::value == FindingKind::Setup ? "setup_<item>" : name);
#include "diagnose/finding_kinds.def"
#undef TS_FINDING
  const std::string text = file_text(kSourceDir + "/docs/formats.md");
  const auto row = text.find("| `findings[].kind` |");
  ASSERT_NE(row, std::string::npos) << "docs/formats.md lacks the row of findings[].kind";
  const std::string cell = text.substr(row, text.find('\n', row) - row);
  Names documented_kinds;
  const std::regex quoted("`([a-z0-9_<>]+)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), quoted); it != std::sregex_iterator(); ++it)
    if ((*it)[1] != "string") documented_kinds.insert((*it)[1]);
  expect_same(kinds, documented_kinds, "finding kinds", "docs/formats.md");
}

TEST(Docs, InterposedFunctionsAreApiDefsEntries) {
  Names entries;
#define TS_API(name, ...) entries.insert(#name);
#define TS_RECORD(...)
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
  ASSERT_EQ(entries.size(), kApiCount - 8) << "every Api but the records (ncclGpuTiming, gpuKernel, gpuMemcpy, "
                                              "gpuMemset, threadSample, processSample, gpuTimelineOn, gpuTimelineOff)";
  expect_same(entries, documented("docs/recording.md", "<!-- list:interposed -->"), "functions of api.def",
              "docs/recording.md");
}

TEST(Docs, EveryApiClassHasItsRecordFieldsDocumented) {
  Names classes;
  for (const ApiInfo& api : kApis) classes.insert(std::string(api_class_name(api.api_class)));
  expect_same(classes, documented("docs/architecture.md", "<!-- list:api-classes -->"), "API classes",
              "docs/architecture.md");
}

// What the code reads: a string literal that is a whole variable name in the C++ of the product and
// of the tests and benchmarks, and in scripts a shell expansion or a Python environ lookup.
Names variables_read() {
  namespace fs = std::filesystem;
  Names names;
  static const std::regex cpp_literal("\"(TRAINSHIM_[A-Z0-9_]+)\"");
  static const std::regex script_read(R"((?:\$\{?|environ\.get\(\"|environ\[\")(TRAINSHIM_[A-Z0-9_]+))");
  auto scan = [&](const std::string& dir, const std::regex& pattern, bool cpp) {
    for (const auto& entry : fs::recursive_directory_iterator(kSourceDir + "/" + dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (cpp != (ext == ".cpp" || ext == ".hpp" || ext == ".h")) continue;
      const std::string text = file_text(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), pattern), last; it != last; ++it) names.insert((*it)[1]);
    }
  };
  for (const char* dir : {"common", "shim", "collector", "viewer-cli", "tests"}) scan(dir, cpp_literal, true);
  scan("scripts", script_read, false);
  return names;
}

TEST(Docs, EveryEnvironmentVariableIsDocumentedAndExists) {
  const Names read = variables_read();
  ASSERT_TRUE(read.count("TRAINSHIM_JOB") && read.count("TRAINSHIM_FUZZ_SECONDS")) << listed(read);
  expect_same(read, documented("README.md", "<!-- list:environment -->"), "TRAINSHIM_* variables", "README.md");
}

// docs/safety.md names the test that keeps each promise: `Suite.Name`, or `Suite.*` for a suite.
TEST(Docs, TheTestsSafetyMdNamesExist) {
  namespace fs = std::filesystem;
  Names defined, suites;
  static const std::regex test_macro(R"(TEST(?:_F|_P)?\(\s*(\w+),\s*(\w+)\))");
  for (const auto& entry : fs::recursive_directory_iterator(kSourceDir + "/tests")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".cpp") continue;
    const std::string text = file_text(entry.path());
    for (std::sregex_iterator it(text.begin(), text.end(), test_macro), last; it != last; ++it) {
      defined.insert((*it)[1].str() + "." + (*it)[2].str());
      suites.insert((*it)[1]);
    }
  }
  const std::string doc = file_text(kSourceDir + "/docs/safety.md");
  static const std::regex named("`([A-Z][A-Za-z0-9]*)\\.([A-Z][A-Za-z0-9]*|\\*)`");
  Names missing;
  int seen = 0;
  for (std::sregex_iterator it(doc.begin(), doc.end(), named), last; it != last; ++it, ++seen) {
    const std::string suite = (*it)[1], name = (*it)[2];
    if (name == "*" ? !suites.count(suite) : !defined.count(suite + "." + name)) missing.insert(suite + "." + name);
  }
  EXPECT_GT(seen, 50);
  EXPECT_EQ(missing, Names{}) << "tests named in docs/safety.md that do not exist:" << listed(missing);
}

// formats.md maps each counter's database column to its JSON key: the two names differ.
TEST(Docs, CountersTableMatchesCountersDef) {
  Names code, docs;
  for (const CounterInfo& c : kCounters)
    code.insert(fmt::format("{} -> {} ({})", c.column, c.json_key,
                            c.kind == CounterKind::Lost      ? "lost"
                            : c.kind == CounterKind::Untimed ? "untimed"
                            : c.kind == CounterKind::Gpu     ? "gpu"
                                                             : "sampler"));
  for (const Row& row :
       table_rows(file_text(kSourceDir + "/docs/formats.md"), "<!-- list:counters -->", "docs/formats.md")) {
    ASSERT_GE(row.size(), 3u) << "a row of the counters table needs a column, a JSON key and a kind";
    const Names column = quoted_names(row[0]), key = quoted_names(row[1]);
    std::string kind = row[2];
    std::erase(kind, ' ');
    docs.insert(
        fmt::format("{} -> {} ({})", column.empty() ? "?" : *column.begin(), key.empty() ? "?" : *key.begin(), kind));
  }
  expect_same(code, docs, "counters of counters.def", "docs/formats.md");
}

// The application as main.cpp builds it (but --version, which main adds itself).
struct Cli {
  CLI::App app;
  std::vector<Command> commands{add_run_command(app),  add_report_command(app), add_audit_command(app),
                                add_diff_command(app), add_export_command(app), add_collect_command(app),
                                add_dump_command(app), add_metrics_command(app)};

  std::vector<const CLI::App*> subcommands() const {
    return app.get_subcommands([](const CLI::App*) { return true; });
  }
};

// What `--format` of a subcommand accepts: CLI11 describes an IsMember check as "{a,b}".
Names formats_of(const CLI::App& command) {
  const CLI::Option* format = command.get_option_no_throw("--format");
  if (!format) return {};
  const std::string type = format->get_type_name();
  const auto open = type.find('{'), close = type.find('}');
  if (open == std::string::npos || close == std::string::npos) return {"?" + type};
  Names out;
  std::stringstream values(type.substr(open + 1, close - open - 1));
  for (std::string value; std::getline(values, value, ',');) out.insert(value);
  return out;
}

// docs/commands/<command>.md's flag table (<!-- list:flags -->) against the subcommand's options:
// each flag's names (`-o, --output FILE`: -o and --output), and as many positional rows (`DB ...`)
// as the command has positional arguments.
TEST(Docs, EveryCommandsFlagsAreTheDocumentedOnes) {
  const Cli cli;
  ASSERT_EQ(cli.subcommands().size(), 8u);
  for (const CLI::App* command : cli.subcommands()) {
    const std::string name = command->get_name();
    const std::string doc = "docs/commands/" + name + ".md";
    Names code, docs;
    int code_positionals = 0, doc_positionals = 0;
    for (const CLI::Option* option : command->get_options()) {
      if (option == command->get_help_ptr()) continue;
      if (!option->nonpositional()) ++code_positionals;
      for (const std::string& l : option->get_lnames()) code.insert("--" + l);
      for (const std::string& s : option->get_snames()) code.insert("-" + s);
    }
    for (const std::string& cell : documented(doc, "<!-- list:flags -->")) {
      std::stringstream words(cell);
      bool flag = false;
      for (std::string word; words >> word;) {
        if (!word.empty() && word.back() == ',') word.pop_back();
        if (word.rfind('-', 0) == 0) {
          docs.insert(word);
          flag = true;
        }
      }
      if (!flag) ++doc_positionals;
    }
    expect_same(code, docs, "flags of trainshim " + name, doc);
    EXPECT_EQ(code_positionals, doc_positionals) << "positional arguments of trainshim " << name << " in " << doc;
  }
}

// README.md's table of commands: every command, and for each the formats its --format accepts.
TEST(Docs, ReadmeListsEveryCommandWithItsFormats) {
  const Cli cli;
  Names code, docs;
  for (const CLI::App* command : cli.subcommands()) {
    std::string formats;
    for (const std::string& format : formats_of(*command)) formats += " " + format;
    code.insert(command->get_name() + ":" + formats);
  }
  for (const Row& row : table_rows(file_text(kSourceDir + "/README.md"), "<!-- list:commands -->", "README.md")) {
    ASSERT_GE(row.size(), 3u) << "a row of the commands table needs a command, what it does and its formats";
    const Names command = quoted_names(row[0]);
    std::string formats;
    for (const std::string& format : quoted_names(row[2])) formats += " " + format;
    docs.insert((command.empty() ? "?" : command.begin()->substr(command.begin()->find(' ') + 1)) + ":" + formats);
  }
  expect_same(code, docs, "commands and their --format values", "README.md");
}

// `text` without its fenced code blocks, whose backticks would pair with the prose's.
std::string without_code_blocks(const std::string& text) {
  std::stringstream lines(text);
  std::string out;
  bool in_block = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) in_block = !in_block;
    else if (!in_block) out += line + "\n";
  }
  return out;
}

// README.md and every page of docs/.
std::vector<std::filesystem::path> markdown_pages() {
  std::vector<std::filesystem::path> pages{kSourceDir + "/README.md"};
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kSourceDir + "/docs"))
    if (entry.is_regular_file() && entry.path().extension() == ".md") pages.push_back(entry.path());
  return pages;
}

// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, punctuation dropped.
std::string anchor_of(const std::string& heading) {
  std::string anchor;
  for (const char c : heading) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_') anchor += char(std::tolower(u));
    else if (c == ' ') anchor += '-';
  }
  return anchor;
}

Names anchors_in(const std::string& text) {
  Names anchors;
  static const std::regex heading(R"((?:^|\n)#+ ([^\n]+))");
  const std::string prose = without_code_blocks(text);
  for (std::sregex_iterator it(prose.begin(), prose.end(), heading), last; it != last; ++it)
    anchors.insert(anchor_of((*it)[1]));
  return anchors;
}

// Every relative link of README.md and docs/ leads to a file of the tree, and its #anchor, if it
// has one and points at a Markdown page, to a heading of that page.
TEST(Docs, RelativeLinksLeadToFilesAndHeadings) {
  namespace fs = std::filesystem;
  Names broken;
  int seen = 0;
  for (const fs::path& page : markdown_pages()) {
    const std::string text = file_text(page);
    static const std::regex link(R"(\]\(([^)\s]+)\))");
    for (std::sregex_iterator it(text.begin(), text.end(), link), last; it != last; ++it) {
      const std::string target = (*it)[1];
      if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
      ++seen;
      const auto hash = target.find('#');
      const std::string file = target.substr(0, hash);
      const fs::path path = file.empty() ? page : page.parent_path() / file;
      const std::string where = fs::relative(page, kSourceDir).string() + ": " + target;
      if (!fs::exists(path)) broken.insert(where + " (no such file)");
      else if (hash != std::string::npos && path.extension() == ".md" &&
               !anchors_in(file_text(path)).count(target.substr(hash + 1)))
        broken.insert(where + " (no such heading)");
    }
  }
  EXPECT_GT(seen, 40);
  EXPECT_EQ(broken, Names{}) << "links that lead nowhere:" << listed(broken);
}

// The source files the pages name in backticks exist: a path from the top of the tree
// (`shim/call.hpp`), or a bare name (`segment.cpp`) somewhere in it; `recorder.*` stands for
// recorder.cpp and recorder.hpp. Headers from outside the tree (`nccl.h`) are named bare: only a
// path is checked for them.
TEST(Docs, TheSourceFilesThePagesNameExist) {
  namespace fs = std::filesystem;
  Names stems, files;
  for (const char* dir : {"common", "launch", "shim", "collector", "viewer-cli", "tests", "scripts"})
    for (const auto& entry : fs::recursive_directory_iterator(kSourceDir + "/" + dir))
      if (entry.is_regular_file()) {
        files.insert(entry.path().filename().string());
        stems.insert(entry.path().stem().string());
      }
  Names missing;
  static const std::regex source(R"((?:^|[\s`(])([\w./-]+)\.(cpp|hpp|def|h|\*)(?=[`\s,)]))");
  for (const fs::path& page : markdown_pages()) {
    const std::string text = without_code_blocks(file_text(page));
    static const std::regex quoted("`([^`]+)`");
    for (std::sregex_iterator q(text.begin(), text.end(), quoted), end; q != end; ++q) {
      const std::string words = " " + (*q)[1].str() + " ";
      for (std::sregex_iterator it(words.begin(), words.end(), source), last; it != last; ++it) {
        const std::string stem = (*it)[1], ext = (*it)[2];
        if (stem.front() == '/' || stem.front() == '.') continue;  // outside the tree, or relative to it
        const std::string base = fs::path(stem).filename().string();
        if (ext == "*" && std::isupper(static_cast<unsigned char>(base.front()))) continue;  // a test suite, `Suite.*`
        const bool path = stem.find('/') != std::string::npos;
        bool found;
        if (ext == "*")
          found = path ? fs::exists(kSourceDir + "/" + stem + ".cpp") || fs::exists(kSourceDir + "/" + stem + ".hpp")
                       : stems.count(stem) > 0;
        else if (path) found = fs::exists(kSourceDir + "/" + stem + "." + ext);
        else found = ext == "h" || files.count(stem + "." + ext) > 0;
        if (!found) missing.insert(fs::relative(page, kSourceDir).string() + ": " + stem + "." + ext);
      }
    }
  }
  EXPECT_EQ(missing, Names{}) << "source files named in the docs that do not exist:" << listed(missing);
}

// The functions, types, constants and targets architecture.md and adding-an-api.md name in
// backticks (`create_segment`, `Call::wants_stacks()`: a name with `_` or `::`) are words of the
// sources or their CMakeLists.txt.
TEST(Docs, TheCodeNamesTheWalkthroughsCiteExist) {
  namespace fs = std::filesystem;
  Names words;
  for (const char* dir : {"common", "launch", "shim", "collector", "viewer-cli", "tests"})
    for (const auto& entry : fs::recursive_directory_iterator(kSourceDir + "/" + dir)) {
      const std::string ext = entry.path().extension().string();
      const bool source = ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".def";
      if (!entry.is_regular_file() || !(source || entry.path().filename() == "CMakeLists.txt")) continue;
      std::string word;
      for (const char c : file_text(entry.path()) + " ") {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') word += c;
        else if (!word.empty()) words.insert(std::exchange(word, {}));
      }
    }
  Names missing;
  static const std::regex name(R"([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:\(\))?)");
  static const std::regex quoted("`([^`]+)`");
  for (const char* doc : {"docs/architecture.md", "docs/adding-an-api.md"}) {
    const std::string text = without_code_blocks(file_text(kSourceDir + "/" + doc));
    for (std::sregex_iterator it(text.begin(), text.end(), quoted), last; it != last; ++it) {
      std::string cited = (*it)[1];
      if (!std::regex_match(cited, name) || cited.find_first_of("_:") == std::string::npos) continue;
      if (cited.ends_with("()")) cited.resize(cited.size() - 2);
      const auto scope = cited.rfind("::");
      if (!words.count(scope == std::string::npos ? cited : cited.substr(scope + 2)))
        missing.insert(std::string(doc) + ": " + (*it)[1].str());
    }
  }
  EXPECT_EQ(missing, Names{}) << "names cited in the docs that no source has:" << listed(missing);
}

TEST(Docs, BracesInADocumentedPathExpand) {
  EXPECT_EQ(expand_braces("{ranks[],totals}.copies[].{calls,bytes}"),
            (std::vector<std::string>{"ranks[].copies[].calls", "ranks[].copies[].bytes", "totals.copies[].calls",
                                      "totals.copies[].bytes"}));
  EXPECT_EQ(first_column("<!-- keys:x -->\n\n| key | meaning |\n|---|---|\n| `a`, `b.{c,d}` | x |\n| `e` | y |\n\n"
                         "| `not` | this table |\n",
                         "<!-- keys:x -->", "text"),
            (Names{"a", "b.c", "b.d", "e"}));
}

}  // namespace
}  // namespace trainshim::cli
