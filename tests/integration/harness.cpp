#include "harness.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "trainshim/names.hpp"

namespace trainshim::test {

Outcome run(const std::string& command) {
  const std::string full = "LD_LIBRARY_PATH=" + std::string(Paths::simcuda) + " " + command;
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  std::string out;
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

Scratch::Scratch() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // Parameterised tests have a '/' in their name: a job id and a directory name must not.
  std::string name = info->name();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  // trainshim cuts a job id to 100 characters: the pid and counter that make it unique must stay.
  if (name.size() > 72) name = name.substr(0, 36) + name.substr(name.size() - 36);
  job = "it_" + name + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  dir = (std::filesystem::temp_directory_path() / job).string();
  std::filesystem::create_directories(dir);
}

std::string read_file(const std::string& path) {
  std::string text;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[65536];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(n));
  close(fd);
  return text;
}

bool process_running(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  return !stat.empty() && stat.find(") Z ") == std::string::npos;
}

std::vector<pid_t> collectors_of(const std::string& job) {
  std::vector<pid_t> pids;
  const std::filesystem::path collector = std::filesystem::path(Paths::bin) / "trainshim-collector";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::filesystem::read_symlink(entry.path() / "exe", ec) != collector) continue;
    std::string command = read_file(entry.path() / "cmdline");
    for (char& c : command)
      if (c == '\0') c = ' ';
    const auto pid = pid_t(std::stol(name));
    if (command.find(" --job " + job + " ") != std::string::npos && process_running(pid)) pids.push_back(pid);
  }
  return pids;
}

Scratch::~Scratch() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // A collector exits once its producers are gone and it has drained them (a few seconds idle).
  for (int wait = 0; wait < 300 && !collectors_of(job).empty(); ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const pid_t pid : collectors_of(job)) {
    ADD_FAILURE() << "trainshim-collector " << pid << " of job " << job << " still runs 30 s after the test";
    kill(pid, SIGKILL);
  }
  // Segments and lock files of this test's job, whoever made them: they are sized for real jobs
  // (megabytes each), and nothing else removes them.
  for (const auto& entry : std::filesystem::directory_iterator(kShmDir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool segment = name.find("-" + job + "-") != std::string::npos;
    if (!name.starts_with("trainshim-") || (!segment && name.find("-" + job + ".lock") == std::string::npos)) continue;
    if (!segment || !segments_left) ADD_FAILURE() << "the job left /dev/shm/" << name;
    std::filesystem::remove(entry.path(), ec);
  }
}

std::string trainshim_cli() { return std::string(Paths::bin) + "/trainshim"; }

std::string program(const std::string& name) { return std::string(Paths::programs) + "/" + name; }

bool write_empty_database(const std::string& path, const std::string& job) {
  return run(std::string(Paths::bin) + "/trainshim-collector --job " + job + " --out '" + path +
             "' --exit-when-idle 0.1")
                 .exit_code == 0 &&
         std::filesystem::exists(path);
}

int64_t count_api(const std::string& db, const std::string& api, const std::string& where) {
  if (where == "1")
    return query_int(
        db, "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api WHERE a.name = '" + api + "'");
  // A condition on a record's own fields (result, bytes) needs the records: copies and polls are
  // kept one by one only in the recent window, which holds all of a test's.
  return query_int(db, "SELECT count(*) FROM (SELECT api, result, bytes, direction, host_memory, comm_size FROM events "
                       "UNION ALL SELECT api, result, bytes, direction, host_memory, comm_size FROM recent_events) e "
                       "JOIN apis a ON a.id = e.api WHERE a.name = '" +
                           api + "' AND " + where);
}

std::string as_other_user(const std::string& command) {
  return "setpriv --reuid=" + std::to_string(kOtherUid) + " --regid=" + std::to_string(kOtherUid) + " --clear-groups " +
         command;
}

void share_with_other_users(const Scratch& scratch) {
  std::filesystem::permissions(scratch.dir, std::filesystem::perms(0755));
}

std::string preload_env(const std::string& job) {
  return "TRAINSHIM_JOB=" + job + " TRAINSHIM_COLLECTOR_IDLE_S=" + kTestCollectorIdleSeconds +
         " LD_PRELOAD=" + std::string(Paths::bin) + "/libtrainshim.so";
}

bool eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 1200; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

std::future<Outcome> in_background(const std::string& command) { return std::async(std::launch::async, run, command); }

int marked_line(const std::string& source, const std::string& marker) {
  std::ifstream in(source);
  std::string text;
  for (int line = 1; std::getline(in, text); ++line)
    if (text.find(marker) != std::string::npos) return line;
  throw std::runtime_error(marker + " not found in " + source);
}

int64_t query_int(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(handle);
    throw std::runtime_error("cannot open " + db);
  }
  sqlite3_stmt* stmt = nullptr;
  int64_t value = -1;
  if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
    value = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return value;
}

const nlohmann::json& rank_entry(const nlohmann::json& report, int rank) {
  for (const auto& r : report.at("ranks"))
    if (r.at("rank") == rank) return r;
  throw std::runtime_error("no rank " + std::to_string(rank) + " in the report");
}

nlohmann::json find_row(const nlohmann::json& list, const nlohmann::json& match) {
  for (const auto& row : list) {
    bool all = true;
    for (const auto& [key, value] : match.items()) all = all && row.contains(key) && row.at(key) == value;
    if (all) return row;
  }
  return nullptr;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  return out;
}

std::string cpulist(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : std::to_string(cpus[i]);
    i = j + 1;
  }
  return out;
}

}  // namespace trainshim::test
