// `trainshim export [DB] [--format chrome] [--step STEP] -o FILE`, and the file it writes: under a
// name of its own first, renamed into place once complete; a FIFO or a device is written where it is.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <streambuf>
#include <utility>

#include "commands.hpp"
#include "common.hpp"
#include "render/export.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

namespace {

struct ExportArguments {
  std::string database, format, output, step;
};

// The file a trace is written to, through a descriptor of its own: close() tells whether every byte
// was written.
class TraceFile : public std::streambuf {
 public:
  // A file of its own beside `output`, renamed over it once complete: a reader never sees half a
  // trace. The name is new (O_EXCL) and never a link another user planted in a shared directory
  // (O_NOFOLLOW): a <output>.partial.<random> created here, by this process.
  static std::unique_ptr<TraceFile> beside(const std::string& output) {
    std::random_device random;
    std::string path;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      path = fmt::format("{}.partial.{:08x}", output, random());
      fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0)
      throw UsageError(
          fmt::format("{}: cannot create the trace ({}): pass a writable path with -o", output, std::strerror(errno)));
    return std::unique_ptr<TraceFile>(new TraceFile(path, fd));
  }
  // `output` itself, which exists and is no regular file (a FIFO, /dev/stdout): there is nothing
  // to rename, and a rename would replace the FIFO or the device with a file.
  static std::unique_ptr<TraceFile> in_place(const std::string& output) {
    const int fd = open(output.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      throw UsageError(
          fmt::format("{}: cannot open the output ({}): pass a writable path with -o", output, std::strerror(errno)));
    return std::unique_ptr<TraceFile>(new TraceFile(output, fd));
  }

  ~TraceFile() override { close(); }
  const std::string& path() const { return path_; }
  // False if anything could not be written.
  bool close() {
    if (fd_ < 0) return ok_;
    ok_ = flush() && ok_;
    ok_ = ::close(fd_) == 0 && ok_;
    fd_ = -1;
    return ok_;
  }

 protected:
  int overflow(int c) override {
    if (!flush()) return traits_type::eof();
    if (c != traits_type::eof()) {
      *pptr() = char(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return flush() ? 0 : -1; }

 private:
  bool flush() {
    for (const char* p = pbase(); p < pptr();) {
      const ssize_t n = write(fd_, p, std::size_t(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok_ = false;
        return false;
      }
      p += n;
    }
    setp(buffer_, buffer_ + sizeof buffer_);
    return true;
  }

  TraceFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }

  std::string path_;
  int fd_ = -1;
  bool ok_ = true;
  char buffer_[1 << 16];
};

}  // namespace

void export_trace(const std::string& database, const std::string& output, const std::string& step) {
  if (output.empty()) throw UsageError("no output: pass -o trace.json (or -o - for standard output)");
  RunDatabase db(database);
  if (output == "-") {
    export_chrome_trace(db, std::cout, step);
    return;
  }
  struct stat existing;
  if (stat(output.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    const std::unique_ptr<TraceFile> device = TraceFile::in_place(output);
    std::ostream file(device.get());
    export_chrome_trace(db, file, step);
    file.flush();
    if (!file || !device->close())
      throw std::runtime_error(fmt::format("{}: cannot write the trace: pass another path with -o", output));
    return;
  }
  const std::unique_ptr<TraceFile> partial = TraceFile::beside(output);
  std::ostream file(partial.get());
  try {
    export_chrome_trace(db, file, step);
    file.flush();
    // Not the user's mistake: the disk filled up (exit code 1).
    if (!file || !partial->close())
      throw std::runtime_error(
          fmt::format("{}: cannot write the trace: pass a path with free space with -o", partial->path()));
    std::error_code ec;
    std::filesystem::rename(partial->path(), output, ec);
    if (ec)
      throw UsageError(fmt::format("cannot rename {} to {} ({}): pass a writable path with -o", partial->path(), output,
                                   ec.message()));
  } catch (...) {
    partial->close();
    std::remove(partial->path().c_str());
    throw;
  }
}

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArguments>();
  CLI::App* command = app.add_subcommand("export", "write a run as a trace for Perfetto UI or chrome://tracing");
  command->add_option("database", args->database, "run database (default: the newest ./trainshim-*.db)");
  add_format_option(*command, args->format, {"chrome"});
  command->add_option("-o,--output", args->output, "trace file to write (- for standard output)")->required();
  add_step_option(*command, args->step);
  return {command, [args] {
            export_trace(database_argument(args->database), args->output, step_name(args->step));
            return 0;
          }};
}

}  // namespace trainshim::cli
