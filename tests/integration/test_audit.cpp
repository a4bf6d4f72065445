// The nightly pipeline end to end: a baseline from one run, then the audit of later runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

// The training script of each night, always at the same path (as a checkout is).
const char* kBase = R"(import torch


def train_step(step, weights):
    loss = (weights * step).sum()
    value = loss.item()
    return value


def main():
    weights = torch.randn(1024, device="cuda")
    for step in range(10):
        train_step(step, weights)


main()
)";

std::string changed() {
  std::string s = kBase;
  s.replace(s.find("    return value\n"), 17,
            "    extra = loss.item()  # NEW item\n"
            "    torch.ones(1 << 14).to(\"cuda\")  # NEW upload\n"
            "    return value + extra\n");
  return s;
}

std::string shifted() { return std::string("# a comment added above\n# and another\n") + kBase; }

class NightlyAudit : public ::testing::Test {
 protected:
  void night(const std::string& script, const std::string& db) {
    std::ofstream(s.dir + "/train.py") << script;
    ASSERT_EQ(run("PYTHONPATH=" + std::string(Paths::torchlike_site) + " " + trainshim_cli() +
                  " run --no-report --out " + db + " -- python3 " + s.dir + "/train.py")
                  .exit_code,
              0);
  }
  Outcome audit(const std::string& db, const std::string& format) {
    return run(trainshim_cli() + " audit " + db + " --baseline " + s.dir + "/baseline.json --format " + format);
  }
  Scratch s;
};

TEST_F(NightlyAudit, FailsOnExactlyTheNewSitesAndPassesUnchangedOrShiftedJobs) {
  night(kBase, s.dir + "/night1.db");
  ASSERT_EQ(
      run(trainshim_cli() + " audit " + s.dir + "/night1.db --write-baseline " + s.dir + "/baseline.json").exit_code,
      0);

  night(kBase, s.dir + "/night2.db");
  EXPECT_EQ(audit(s.dir + "/night2.db", "text").exit_code, 0) << audit(s.dir + "/night2.db", "text").out;

  night(shifted(), s.dir + "/night3.db");
  EXPECT_EQ(audit(s.dir + "/night3.db", "text").exit_code, 0)
      << "a line shift is not a new site: " << audit(s.dir + "/night3.db", "text").out;

  const std::string script = changed();
  night(script, s.dir + "/night4.db");
  const std::string file = s.dir + "/train.py";
  const std::string item_site = file + ":" + std::to_string(marked_line(file, "# NEW item")) + " in train_step";
  const std::string upload_site = file + ":" + std::to_string(marked_line(file, "# NEW upload")) + " in train_step";

  const auto as_json = audit(s.dir + "/night4.db", "json");
  EXPECT_EQ(as_json.exit_code, 1);
  const json doc = json::parse(as_json.out);
  EXPECT_FALSE(doc.at("passed").get<bool>());
  std::vector<std::string> sites;
  for (const auto& rule : doc.at("rules"))
    for (const auto& v : rule.at("violations"))
      sites.push_back(rule.at("rule").get<std::string>() + " " + v.at("site").get<std::string>());
  // The upload waits too: a blocking upload synchronises the stream after its copy.
  std::sort(sites.begin(), sites.end());
  EXPECT_EQ(sites, (std::vector<std::string>{"new_pageable_sites " + upload_site, "new_sync_sites " + item_site,
                                             "new_sync_sites " + upload_site}));

  const auto junit = audit(s.dir + "/night4.db", "junit");
  EXPECT_EQ(junit.exit_code, 1);
  EXPECT_NE(junit.out.find("<testsuites name=\"trainshim audit\" tests=\"5\" failures=\"2\" errors=\"0\" "
                           "skipped=\"0\" time=\""),
            std::string::npos)
      << junit.out;
  EXPECT_NE(
      junit.out.find("<testcase classname=\"trainshim.audit.new_sync_sites\" name=\"no rank\" time=\"0\">\n"
                     "      <failure message=\"no hidden sync site that the baseline does not have: 2 violations\" "
                     "type=\"new_sync_sites\">"),
      std::string::npos)
      << junit.out;
  EXPECT_NE(junit.out.find("new hidden sync Tensor.item() at " + item_site), std::string::npos) << junit.out;
  EXPECT_NE(junit.out.find("new pageable H2D copy at " + upload_site), std::string::npos) << junit.out;

  // The same two nights side by side: the new .item() appeared, and more bytes go through
  // pageable memory on the rank.
  const auto diff = run(trainshim_cli() + " diff --json " + s.dir + "/night1.db " + s.dir + "/night4.db");
  ASSERT_EQ(diff.exit_code, 0) << diff.out;
  const json d = json::parse(diff.out);
  std::vector<std::string> appeared;
  for (const auto& site : d.at("sites"))
    if (site.at("status") == "appeared")
      appeared.push_back(site.at("b").at("line").dump() + " " + site.at("operation").get<std::string>());
  std::sort(appeared.begin(), appeared.end());
  EXPECT_EQ(appeared, (std::vector<std::string>{std::to_string(marked_line(file, "# NEW item")) + " Tensor.item()",
                                                std::to_string(marked_line(file, "# NEW upload")) +
                                                    " Tensor.to('cuda') / .cuda() (blocking upload)"}))
      << d.dump(1);

  const auto markdown = audit(s.dir + "/night4.db", "markdown");
  EXPECT_EQ(markdown.exit_code, 1);
  EXPECT_NE(markdown.out.find("- new hidden sync Tensor.item() at " + item_site), std::string::npos) << markdown.out;
  EXPECT_NE(markdown.out.find("- new pageable H2D copy at " + upload_site), std::string::npos) << markdown.out;
}

TEST_F(NightlyAudit, PolicyLimitsAndAllowList) {
  night(kBase, s.dir + "/run.db");
  // One Tensor.item() per step with the defaults (2 per step allowed, 10 % blocked): the blocked
  // share of this tiny loop is far above 10 %, unless the site is allowed.
  std::ofstream(s.dir + "/strict.toml") << "[limits]\nhidden_syncs_per_step = 0.5\nblocked_share = 1.0\n";
  const auto strict = run(trainshim_cli() + " audit " + s.dir + "/run.db --policy " + s.dir + "/strict.toml");
  EXPECT_EQ(strict.exit_code, 1) << strict.out;
  EXPECT_NE(strict.out.find("1.0 hidden syncs per step, limit 0.5"), std::string::npos) << strict.out;
  const std::string line = std::to_string(marked_line(s.dir + "/train.py", "value = loss.item()"));
  std::ofstream(s.dir + "/allow.toml") << "[limits]\nhidden_syncs_per_step = 0.5\nblocked_share = 1.0\n"
                                          "[[allow]]\nsite = \"train.py:" +
                                              line + "\"\nreason = \"loss logging\"\n";
  const auto allowed = run(trainshim_cli() + " audit " + s.dir + "/run.db --policy " + s.dir + "/allow.toml");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.out;
  std::ofstream(s.dir + "/broken.toml") << "[limits\nhidden = ";
  const auto broken = run(trainshim_cli() + " audit " + s.dir + "/run.db --policy " + s.dir + "/broken.toml 2>&1");
  EXPECT_EQ(broken.exit_code, 2);
  EXPECT_NE(broken.out.find("broken.toml:1:"), std::string::npos) << broken.out;
  // A misspelt key or a value of the wrong type is refused where it is, never left to the default.
  std::ofstream(s.dir + "/typo.toml") << "[limits]\nhidden_syncs_per_step = 0.5\nblocked_shares = 1.0\n";
  const auto typo = run(trainshim_cli() + " audit " + s.dir + "/run.db --policy " + s.dir + "/typo.toml 2>&1");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_EQ(typo.out, "trainshim: " + s.dir +
                          "/typo.toml:3:1: unknown key 'blocked_shares' in [limits]: the keys there are "
                          "hidden_syncs_per_step, blocked_share, pageable_bytes_per_step, wait_share, cause_share, "
                          "dropped_events\n");
  std::ofstream(s.dir + "/type.toml") << "[limits]\nblocked_share = \"10%\"\n";
  const auto type = run(trainshim_cli() + " audit " + s.dir + "/run.db --policy " + s.dir + "/type.toml 2>&1");
  EXPECT_EQ(type.exit_code, 2);
  EXPECT_EQ(type.out, "trainshim: " + s.dir + "/type.toml:2:17: 'blocked_share' must be a number\n");
  // Against a baseline of the same run nothing is new; the limits the policy sets are still checked
  // (and said), the defaults it does not set are not.
  ASSERT_EQ(run(trainshim_cli() + " audit " + s.dir + "/run.db --write-baseline " + s.dir + "/base.json").exit_code, 0);
  const auto both = run(trainshim_cli() + " audit " + s.dir + "/run.db --baseline " + s.dir + "/base.json --policy " +
                        s.dir + "/strict.toml");
  EXPECT_EQ(both.exit_code, 1) << both.out;
  EXPECT_NE(both.out.find("  [FAIL] hidden_syncs_per_step: hidden syncs per step per rank <= 0.5\n"), std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("  [ok] blocked_share: "), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("  [ok] new_sync_sites: "), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("pageable_bytes_per_step"), std::string::npos) << both.out;
  const auto baseline_only = run(trainshim_cli() + " audit " + s.dir + "/run.db --baseline " + s.dir + "/base.json");
  EXPECT_EQ(baseline_only.exit_code, 0) << baseline_only.out;
  EXPECT_EQ(baseline_only.out.find("hidden_syncs_per_step"), std::string::npos) << baseline_only.out;
  const auto missing = run(trainshim_cli() + " audit " + s.dir + "/absent.db 2>&1");
  EXPECT_EQ(missing.exit_code, 2);
  std::ofstream(s.dir + "/notbaseline.json") << "{\"x\": 1}";
  EXPECT_EQ(run(trainshim_cli() + " audit " + s.dir + "/run.db --baseline " + s.dir + "/notbaseline.json 2>/dev/null")
                .exit_code,
            2);
}

}  // namespace
}  // namespace trainshim::test
