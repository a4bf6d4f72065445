// trainshim: run a job under the shim, and read what it recorded. Each command is a file of
// commands/; adding one is a line here and a file there.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <exception>

#include "commands/commands.hpp"
#include "errors.hpp"
#include "trainshim/version.hpp"

using namespace trainshim::cli;

int main(int argc, char** argv) {
  CLI::App app{"trainshim: why is this CUDA training job slow? Run it under the shim, then read the report."};
  app.set_version_flag("--version", fmt::format("trainshim {}", trainshim::kTrainshimVersion));
  app.require_subcommand(1);
  const Command commands[] = {add_run_command(app),  add_report_command(app), add_audit_command(app),
                              add_diff_command(app), add_export_command(app), add_collect_command(app)};

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
      if (*command.app) return command.run();
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
