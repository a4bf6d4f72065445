// The job's collector runs the metrics exporter when the job asks for it (TRAINSHIM_METRICS, or
// `trainshim run --metrics`, `trainshim collect --metrics`): the metrics are there while the job
// runs, the exporter stops with the collector and leaves no textfile behind, and a target that
// cannot be served is said in the database's log without touching the job.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "harness.hpp"

namespace trainshim::test {
namespace {

// The processes whose command line holds `word` (the exporters of a test's database).
int processes_naming(const std::string& word) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string cmdline = read_file(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    n += cmdline.starts_with("trainshim metrics ") && cmdline.find(word) != std::string::npos;
  }
  return n;
}

// A loopback socket listening on a port the kernel chose: a port no one else takes while it is
// held, or, closed, one that is very likely free.
struct LoopbackPort {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  LoopbackPort() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 && listen(fd, 1) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0)
      port = ntohs(address.sin_port);
  }
  void release() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  ~LoopbackPort() { release(); }
};

std::string running_rank(const std::string& job) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return "trainshim_process_ended{job=\"" + job + "\",rank=\"-1\",local_rank=\"-1\",host=\"" + host + "\"} 0\n";
}

int64_t log_lines(const std::string& db, const std::string& level, const std::string& like) {
  return query_int(db,
                   "SELECT count(*) FROM collector_log WHERE level = '" + level + "' AND message LIKE '" + like + "'");
}

TEST(MetricsExport, TheJobsCollectorWritesTheTextfileWhileTheJobRunsAndRemovesItAfter) {
  Scratch s;
  const std::string textfile = s.dir + "/trainshim.prom";
  std::future<Outcome> job;
  const Gate gate{s.dir + "/open"};
  job = in_background(preload_env(s.job) + " TRAINSHIM_OUT=" + s.db() + " TRAINSHIM_METRICS=textfile:" + textfile +
                      " TRAINSHIM_METRICS_INTERVAL=1 " + program("gated_copies") + " 5 " + gate.path);
  // The on-demand collector's exporter reads the database as the collector writes it: the rank
  // shows, still running, within an interval or two.
  EXPECT_TRUE(eventually([&] { return read_file(textfile).find(running_rank(s.job)) != std::string::npos; }))
      << read_file(textfile);
  EXPECT_EQ(processes_naming(s.db()), 1);
  gate.open();
  const Outcome done = job.get();
  ASSERT_EQ(done.exit_code, 0) << done.out;
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).empty(); }));
  EXPECT_FALSE(std::filesystem::exists(textfile)) << "node_exporter would serve the ended job's series for good";
  EXPECT_EQ(processes_naming(s.db()), 0);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy"), 10);
  EXPECT_EQ(log_lines(s.db(), "info", "metrics exporter % started: %/trainshim metrics " + s.db()), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM collector_log WHERE level <> 'info'"), 0);
}

TEST(MetricsExport, TrainshimRunServesTheMetricsOverHttpForAsLongAsItsCollectorRuns) {
  Scratch s;
  LoopbackPort free;
  const int port = free.port;
  ASSERT_GT(port, 0);
  free.release();
  std::future<Outcome> job;
  const Gate gate{s.dir + "/open"};
  job = in_background("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_METRICS_INTERVAL=1 " + trainshim_cli() +
                      " run --no-report --out " + s.db() + " --metrics 127.0.0.1:" + std::to_string(port) + " -- " +
                      program("gated_copies") + " 5 " + gate.path);
  httplib::Client client("127.0.0.1", port);
  std::string body;
  EXPECT_TRUE(eventually([&] {
    const auto response = client.Get("/metrics");
    body = response && response->status == 200 ? response->body : "";
    return body.find(running_rank(s.job)) != std::string::npos;
  })) << body;
  gate.open();
  const Outcome done = job.get();
  ASSERT_EQ(done.exit_code, 0) << done.out;
  // `trainshim run` returns once its collector has exited, and the collector once its exporter has.
  EXPECT_FALSE(client.Get("/metrics")) << "the endpoint outlived the job's collector";
  EXPECT_EQ(processes_naming(s.db()), 0);
  EXPECT_EQ(
      log_lines(s.db(), "info", "trainshim metrics: serving http://127.0.0.1:" + std::to_string(port) + "/metrics"), 1);
}

TEST(MetricsExport, ATargetThatCannotBeServedIsLoggedAndTheJobIsCollectedAsAlways) {
  Scratch s;
  const LoopbackPort taken;
  ASSERT_GT(taken.port, 0);
  const Gate gate{s.dir + "/open"};
  gate.open();
  const Outcome job = run(preload_env(s.job) + " TRAINSHIM_OUT=" + s.db() + " TRAINSHIM_METRICS=127.0.0.1:" +
                          std::to_string(taken.port) + " " + program("gated_copies") + " 5 " + gate.path);
  ASSERT_EQ(job.exit_code, 0) << job.out;
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).empty(); }));
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy"), 10);
  EXPECT_EQ(log_lines(s.db(), "warning",
                      "trainshim: --listen 127.0.0.1:" + std::to_string(taken.port) +
                          ": cannot listen there (the port is taken, or the address is not this host''s); choose "
                          "another port"),
            1);
  EXPECT_EQ(log_lines(s.db(), "warning",
                      "the metrics exporter % exited with status 2: the job''s metrics are no longer exported"),
            1);
}

TEST(MetricsExport, RunAndCollectRefuseATargetThatIsNeitherHostPortNorTextfile) {
  for (const std::string command : {"run --metrics 9464 -- true", "collect --job none --metrics textfile:"}) {
    const Outcome refused = run(trainshim_cli() + " " + command + " 2>&1");
    EXPECT_EQ(refused.exit_code, 2) << command;
    EXPECT_NE(refused.out.find(command.starts_with("run") ? "--metrics 9464: not HOST:PORT (such as 0.0.0.0:9464"
                                                          : "--metrics textfile:: textfile: needs a path"),
              std::string::npos)
        << refused.out;
  }
}

// A hang shows in the metrics within a second or two of the collector detecting it, whatever the
// interval between two full readings (here an hour: the reading at the start, before the hang, is
// the only one).
TEST(MetricsExport, AHangShowsAtOnceWhateverTheInterval) {
  Scratch s;
  const std::string textfile = s.dir + "/trainshim.prom";
  const std::string script = std::string(Paths::source) + "/tests/python/hang.py";
  const Outcome started =
      run("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_HANG_S=2 TRAINSHIM_METRICS_INTERVAL=3600 setsid " + trainshim_cli() +
          " run --no-report --out " + s.db() + " --metrics textfile:" + textfile + " -- " + Paths::source +
          "/scripts/simrun -n 4 -- python3 " + script + " > " + s.dir + "/job.log 2>&1 & echo $!");
  const pid_t job = std::stoi(started.out);
  // Rank 1 runs on this node: the series names its host.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string missing =
      "trainshim_hang_missing_rank{job=\"" + s.job + "\",rank=\"1\",host=\"" + std::string(host) + "\"} 1\n";
  const bool shown = eventually([&] { return read_file(textfile).find(missing) != std::string::npos; });
  kill(-job, SIGTERM);
  EXPECT_TRUE(shown) << read_file(textfile);
  EXPECT_TRUE(eventually([&] { return collectors_of(s.job).empty(); }));
  EXPECT_FALSE(std::filesystem::exists(textfile));
}

// Stopped during its first reading, before its endpoint runs, the exporter still stops: httplib's
// stop() does nothing until the listener runs, and a stop asked for before it would leave it
// serving for good. The reading is held by an exclusive lock on the database (SQLite's busy
// timeout) until the exporter's SIGTERM handler is in and the signal sent.
TEST(MetricsExport, AnExporterStoppedDuringItsFirstReadingStops) {
  Scratch s;
  ASSERT_TRUE(write_empty_database(s.db(), s.job));
  sqlite3* lock = nullptr;
  ASSERT_EQ(sqlite3_open(s.db().c_str(), &lock), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(lock, "PRAGMA journal_mode=DELETE; BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(lock);
  // In a session of its own, under a timeout that kills it should this test be killed first.
  const std::string log = s.dir + "/exporter.log";
  const Outcome started = run("setsid timeout -s KILL 120 " + trainshim_cli() + " metrics " + s.db() +
                              " --listen 127.0.0.1:0 --interval 3600 > " + log + " 2>&1 & echo $!");
  const pid_t session = std::stoi(started.out);
  const auto proc = [](pid_t pid) { return "/proc/" + std::to_string(pid); };
  const auto exporter_pid = [&] {
    const std::string children = read_file(proc(session) + "/task/" + std::to_string(session) + "/children");
    return children.empty() ? 0 : std::stoi(children);
  };
  const auto handles_sigterm = [&] {
    const pid_t exporter = exporter_pid();
    const std::string status = exporter ? read_file(proc(exporter) + "/status") : "";
    const auto at = status.find("SigCgt:\t");
    return at != std::string::npos && (std::stoull(status.substr(at + 8, 16), nullptr, 16) & (1ull << (SIGTERM - 1)));
  };
  EXPECT_TRUE(eventually(handles_sigterm)) << read_file(log);
  kill(exporter_pid(), SIGTERM);
  sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(lock);
  const bool stopped = eventually([&] { return !process_running(session); });
  if (!stopped) kill(-session, SIGKILL);
  EXPECT_TRUE(stopped) << "the exporter went on serving after SIGTERM: " << read_file(log);
}

// A textfile that cannot be written is refused at once, naming the option that gave its path.
TEST(MetricsExport, ATextfileThatCannotBeWrittenIsRefusedNamingItsOption) {
  Scratch s;
  ASSERT_EQ(run(preload_env(s.job) + " TRAINSHIM_OUT=" + s.db() + " " + program("host_copies_prog") + " 2 1").exit_code,
            0);
  // The job's collector writes the database after the job: read it once written.
  ASSERT_TRUE(eventually([&] { return collectors_of(s.job).empty(); }));
  const std::string textfile = s.dir + "/absent/trainshim.prom";
  const Outcome refused = run(trainshim_cli() + " metrics " + s.db() + " --textfile " + textfile + " --once 2>&1");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.out, "trainshim: " + textfile +
                             ": cannot create the metrics (No such file or directory): pass a writable path with "
                             "--textfile (or TRAINSHIM_METRICS=textfile:PATH)\n");
}

}  // namespace
}  // namespace trainshim::test
