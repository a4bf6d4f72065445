// The `trainshim` command's flags: --format on every command that prints (with --json for
// --format json), --step on audit, --version.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "harness.hpp"
#include "trainshim/version.hpp"

namespace trainshim::test {
namespace {

// One .item() in each of ten calls of train_step.
const char* kTenSteps = R"(import torch


def train_step(step, weights):
    loss = (weights * step).sum()
    return loss.item()


def main():
    weights = torch.randn(1024, device="cuda")
    for step in range(10):
        train_step(step, weights)


main()
)";

class CliFlags : public ::testing::Test {
 protected:
  // `trainshim run` of the ten steps with `flags`, writing `db`.
  Outcome run_job(const std::string& db, const std::string& flags) {
    std::ofstream(s.dir + "/train.py") << kTenSteps;
    return run("PYTHONPATH=" + std::string(Paths::torchlike_site) + " " + trainshim_cli() + " run " + flags +
               " --out " + db + " -- python3 " + s.dir + "/train.py");
  }
  Scratch s;
};

TEST_F(CliFlags, FormatJsonPrintsExactlyWhatJsonPrints) {
  const std::string a = s.dir + "/a.db", b = s.dir + "/b.db";
  const Outcome run_json = run_job(a, "--json");
  const Outcome run_format = run_job(b, "--format json");
  ASSERT_EQ(run_json.exit_code, 0);
  ASSERT_EQ(run_format.exit_code, 0);
  // Two runs differ in their times: each prints what `report` prints of its database.
  EXPECT_EQ(run_json.out, run(trainshim_cli() + " report --format json " + a).out);
  EXPECT_EQ(run_format.out, run(trainshim_cli() + " report --json " + b).out);
  EXPECT_EQ(nlohmann::json::parse(run_format.out).at("format"), "trainshim-report/1");

  const Outcome report_json = run(trainshim_cli() + " report --json " + a);
  ASSERT_EQ(report_json.exit_code, 0);
  EXPECT_EQ(run(trainshim_cli() + " report --format json " + a).out, report_json.out);
  EXPECT_EQ(run(trainshim_cli() + " report --format text " + a).out, run(trainshim_cli() + " report " + a).out);
  EXPECT_TRUE(run(trainshim_cli() + " report " + a).out.starts_with("trainshim report: job "));

  const Outcome diff_json = run(trainshim_cli() + " diff --json " + a + " " + b);
  ASSERT_EQ(diff_json.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(diff_json.out).at("format"), "trainshim-diff/1");
  EXPECT_EQ(run(trainshim_cli() + " diff --format json " + a + " " + b).out, diff_json.out);
  EXPECT_EQ(run(trainshim_cli() + " diff --format text " + a + " " + b).out,
            run(trainshim_cli() + " diff " + a + " " + b).out);

  const Outcome audit_json = run(trainshim_cli() + " audit --format json " + a);
  EXPECT_EQ(nlohmann::json::parse(audit_json.out).at("format"), "trainshim-audit/1");
  EXPECT_EQ(run(trainshim_cli() + " audit --json " + a).out, audit_json.out);
}

TEST_F(CliFlags, AuditStepOverridesTrainshimStep) {
  const std::string db = s.dir + "/run.db";
  ASSERT_EQ(run_job(db, "--no-report").exit_code, 0);
  std::ofstream(s.dir + "/strict.toml") << "[limits]\nhidden_syncs_per_step = 0.5\nblocked_share = 1.0\n";
  const std::string audit = trainshim_cli() + " audit " + db + " --policy " + s.dir + "/strict.toml";
  const Outcome unmatched = run("TRAINSHIM_STEP=no_such_function " + audit);
  EXPECT_EQ(unmatched.exit_code, 1);
  EXPECT_NE(unmatched.out.find("10.0 hidden syncs in the run (no steps found), limit 0.5"), std::string::npos)
      << unmatched.out;
  const Outcome stepped = run("TRAINSHIM_STEP=no_such_function " + audit + " --step train_step");
  EXPECT_EQ(stepped.exit_code, 1);
  EXPECT_NE(stepped.out.find("1.0 hidden syncs per step, limit 0.5"), std::string::npos) << stepped.out;
  EXPECT_EQ(stepped.out.find("no steps found"), std::string::npos) << stepped.out;
}

// /dev/full takes no byte (ENOSPC): a report that was not written must not exit 0 as if it had been.
TEST_F(CliFlags, OutputThatCannotBeWrittenExits1AndSaysSo) {
  const std::string db = s.dir + "/run.db";
  ASSERT_EQ(run_job(db, "--no-report").exit_code, 0);
  // Standard error to the pipe the test reads, standard output to /dev/full.
  for (const std::string& command : {"report " + db, "report --json " + db, "audit " + db, "diff " + db + " " + db}) {
    const Outcome full = run(trainshim_cli() + " " + command + " 2>&1 >/dev/full");
    EXPECT_EQ(full.exit_code, 1) << command;
    EXPECT_EQ(full.out, "trainshim: cannot write the output (No space left on device): write it to a disk with free "
                        "space\n")
        << command;
  }
  const Outcome full_run = run_job(s.dir + "/again.db", "2>&1 >/dev/full");
  EXPECT_EQ(full_run.exit_code, 1);
  EXPECT_NE(full_run.out.find("trainshim: cannot write the output (No space left on device)"), std::string::npos)
      << full_run.out;
}

// A trace that cannot be created is said of the path the user gave, not of the file written beside it.
TEST_F(CliFlags, ATraceThatCannotBeCreatedNamesTheGivenPath) {
  const std::string db = s.dir + "/run.db";
  ASSERT_EQ(run_job(db, "--no-report").exit_code, 0);
  const Outcome refused = run(trainshim_cli() + " export " + db + " -o " + s.dir + "/absent/trace.json 2>&1");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.out, "trainshim: " + s.dir +
                             "/absent/trace.json: cannot create the trace (No such file or directory): pass a "
                             "writable path with -o\n");
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  const Outcome version = run(trainshim_cli() + " --version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "trainshim " + std::string(kTrainshimVersion) + "\n");
}

TEST(Cli, UnknownFormatExits2WithTheFormatsThatExist) {
  Scratch s;
  const std::string db = s.dir + "/run.db";
  // Refused while the arguments are read: no database is opened, no job is run.
  const std::pair<std::string, std::string> commands[] = {
      {"report " + db, "{text,json,html}"},
      {"diff " + db + " " + db, "{text,json}"},
      {"run --out " + db, "{text,json}"},
      {"audit " + db, "{text,json,junit,markdown}"},
      {"export " + db + " -o -", "{chrome,kineto}"},
      {"dump " + db, "{text,json}"},
  };
  for (const auto& [command, formats] : commands) {
    const Outcome refused = run(trainshim_cli() + " " + command + " --format pprof -- true 2>&1");
    EXPECT_EQ(refused.exit_code, 2) << command;
    EXPECT_NE(refused.out.find("--format: pprof not in " + formats), std::string::npos)
        << command << ": " << refused.out;
  }
  const Outcome both = run(trainshim_cli() + " report " + db + " --json --format text 2>&1");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.out.find("excludes"), std::string::npos) << both.out;
}

// A value out of range is refused while the arguments are read, in words: what the flag takes.
TEST(Cli, AnIdleGapOfZeroOrNoNumberSaysWhatTheFlagTakes) {
  Scratch s;
  for (const std::string value : {"0", "-2", "abc", "nan"}) {
    const Outcome refused = run(trainshim_cli() + " report " + s.dir + "/run.db --idle-gap-ms " + value + " 2>&1");
    EXPECT_EQ(refused.exit_code, 2) << value;
    EXPECT_EQ(refused.out.substr(0, refused.out.find('\n')),
              "--idle-gap-ms: a number of milliseconds above 0 (0.5, 2, 20), not " + value)
        << refused.out;
  }
}

}  // namespace
}  // namespace trainshim::test
