#pragma once
// The node's metrics exporter, `trainshim metrics DB --remove-on-exit`, run by the collector while
// it writes DB when the job's environment asks for it (TRAINSHIM_METRICS): the job's metrics are
// served, or written for node_exporter, for exactly as long as its collector runs. The exporter is
// a process of its own: computing the metrics never holds up the drain. It dies with the
// collector, even a killed one (PR_SET_PDEATHSIG).
#include <sys/types.h>

#include <string>
#include <vector>

namespace trainshim::collector {

class MetricsExporter {
 public:
  // Starts `program` (the trainshim CLI) on `database`; std::runtime_error when it cannot.
  MetricsExporter(const std::string& program, const std::string& database);
  // Stops it (SIGTERM, SIGKILL after kStopGrace): it removes its textfile as it goes.
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  pid_t pid() const { return pid_; }
  // What it said since the last call, a line each: on standard output (what it does) and on
  // standard error (what went wrong); and, the first time it is found to have exited, how.
  struct Messages {
    std::vector<std::string> said, errors;
    std::string exit;
  };
  Messages take_messages();

 private:
  // The read end of a pipe from the exporter (non-blocking), and what came after its last newline.
  struct Stream {
    int fd = -1;
    std::string partial;
    // Appends the whole lines read so far to `lines`; `all`: the unfinished one too.
    void take_lines(std::vector<std::string>& lines, bool all);
  };
  pid_t pid_ = -1;
  Stream output_, errors_;
  bool exited_ = false;
};

// The trainshim CLI beside this collector's executable.
std::string exporter_program();

}  // namespace trainshim::collector
