// trainshim: run a job under the shim, and read what it recorded. Each command is a file of
// commands/; adding one is a line here and a file there.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <streambuf>

#include "commands/commands.hpp"
#include "errors.hpp"
#include "trainshim/version.hpp"

using namespace trainshim::cli;

namespace {

// std::cout written through stdio's stdout, as fmt::print writes, keeping the error of the first
// write that failed: stdio writes its buffer out while the command prints, and errno is
// overwritten after.
class StdoutBuffer : public std::streambuf {
 public:
  int error() const { return error_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char byte = char(c);
    return xsputn(&byte, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* text, std::streamsize size) override {
    const std::size_t written = std::fwrite(text, 1, std::size_t(size), stdout);
    if (written < std::size_t(size)) failed();
    return std::streamsize(written);
  }
  int sync() override {
    if (std::fflush(stdout) == 0) return 0;
    failed();
    return -1;
  }

 private:
  void failed() {
    if (!error_) error_ = errno ? errno : EIO;
  }
  int error_ = 0;
};

// A full disk may show only once the output is flushed: the exit code must not say that an output
// which was never written was. A reader that closed the pipe (`| head`) kills trainshim with
// SIGPIPE; where SIGPIPE is ignored, EPIPE exits 1 without a message, as the reader stopped on
// purpose. Returns the exit code.
int flush_output(StdoutBuffer& output, int code) {
  std::cout.flush();
  if (!output.error() && !std::ferror(stdout)) return code;
  const int error = output.error() ? output.error() : EIO;
  if (error != EPIPE)
    fmt::print(stderr, "trainshim: cannot write the output ({}): write it to a disk with free space\n",
               std::strerror(error));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  StdoutBuffer output;
  // std::cout is flushed once more at exit, after `output` is gone: it is given its own back first.
  const std::unique_ptr<std::streambuf, void (*)(std::streambuf*)> restore(
      std::cout.rdbuf(&output), [](std::streambuf* own) { std::cout.rdbuf(own); });
  CLI::App app{"trainshim: why is this CUDA training job slow? Run it under the shim, then read the report."};
  app.set_version_flag("--version", fmt::format("trainshim {}", trainshim::kTrainshimVersion));
  app.require_subcommand(1);
  const Command commands[] = {add_run_command(app),  add_report_command(app), add_audit_command(app),
                              add_diff_command(app), add_export_command(app), add_collect_command(app),
                              add_dump_command(app), add_metrics_command(app)};

  // Exit codes (README: "Exit codes of trainshim"): 2 for the user's mistakes and inputs that
  // cannot be read, 1 for any other failure; a command's own code otherwise.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const Command& command : commands)
      if (*command.app) return flush_output(output, command.run());
  } catch (const UsageError& e) {
    fmt::print(stderr, "trainshim: {}\n", e.what());
    return 2;
  } catch (const InputError& e) {
    fmt::print(stderr, "trainshim: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainshim: {}\n", e.what());
    return 1;
  }
  return 2;
}
