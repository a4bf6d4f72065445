"""scripts/check-scenario on hand-made reports: a report with the expected verdicts passes, and
each false or missing finding the scenarios plant against fails with its line named."""
import argparse
import contextlib
import copy
import importlib.machinery
import io
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "scripts", "check-scenario")
RUN = os.path.join(ROOT, "scripts", "run-scenarios")


def load_script(path):
    """A script of scripts/ (no .py ending) as a module, to call its functions."""
    loader = importlib.machinery.SourceFileLoader(os.path.basename(path).replace("-", "_"), path)
    module = types.ModuleType(loader.name)
    module.__file__ = path
    loader.exec_module(module)
    return module


S2 = "/job/tests/scenarios/s02_upload.py"  # lines 8, 9, 10: upload_blocking, upload_async, download
S10 = "/job/tests/scenarios/s10_p2p_grouped.py"


def plant(script, name):
    with open(os.path.join(ROOT, "tests", "scenarios", script), encoding="utf-8") as source:
        return next(n for n, text in enumerate(source, start=1) if text.rstrip().endswith(f"# PLANT {name}"))


def site(operation, path, line, calls, **extra):
    return dict({"operation": operation, "file": path, "line": line, "calls": calls}, **extra)


def rank(number, hidden=(), explicit=(), pageable=(), copies=()):
    return {"rank": number, "copies": list(copies), "hidden_syncs": list(hidden), "explicit_syncs": list(explicit),
            "pageable_sites": list(pageable)}


GOOD_S2 = {
    "format": "trainshim-report/1",
    "ranks": [rank(None,
                   hidden=[site("Tensor.to('cuda') / .cuda() (blocking upload)", S2, 8, 20),
                           site("Tensor.cpu() / .to('cpu')", S2, 10, 20)],
                   pageable=[site("pageable H2D copy", S2, 8, 20), site("pageable D2H copy", S2, 10, 20)],
                   copies=[{"direction": "h2d", "host_memory": "pageable", "calls": 20},
                           {"direction": "h2d", "host_memory": "pinned", "calls": 20},
                           {"direction": "d2h", "host_memory": "pageable", "calls": 20}])],
    "collective_waits": {"matched": 0, "incomplete": 0, "communicators": 0, "straggler": None},
    "hangs": [],
}

GOOD_S10 = {
    "format": "trainshim-report/1",
    "ranks": [rank(r, explicit=[site("torch.cuda.synchronize()", S10, plant("s10_p2p_grouped.py", "final_sync"), 1)]) for r in (0, 1)],
    "collective_waits": {"matched": 70, "incomplete": 0, "inconsistent": 0, "communicators": 1,
                         "straggler": {"rank": 1, "imposed_ns": 1500000000}},
    "hangs": [],
}


class CheckScenario(unittest.TestCase):
    def check(self, scenario, report, *extra):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(report, f)
        try:
            result = subprocess.run([sys.executable, CHECK, scenario, f.name, *extra], capture_output=True,
                                    text=True, check=False)
        finally:
            os.unlink(f.name)
        return result.returncode, result.stdout.strip()

    def test_expected_verdicts_pass(self):
        self.assertEqual(self.check("S2", GOOD_S2), (0, "S2 PASS (11 checks)"))
        self.assertEqual(self.check("S10", GOOD_S10, "--variant", "plain"), (0, "S10[plain] PASS (8 checks)"))

    def test_upload_named_cpu_fails(self):
        report = copy.deepcopy(GOOD_S2)
        report["ranks"][0]["hidden_syncs"][0]["operation"] = "Tensor.cpu() / .to('cpu')"
        code, line = self.check("S2", report)
        self.assertEqual(code, 1)
        self.assertIn("no hidden_syncs site \"Tensor.to('cuda') / .cuda() (blocking upload)\" at PLANT "
                      "upload_blocking", line)
        self.assertIn("unexpected hidden_syncs \"Tensor.cpu() / .to('cpu')\" x20 at s02_upload.py:8 "
                      "(PLANT upload_blocking)", line)

    def test_sync_at_pinned_upload_fails(self):
        report = copy.deepcopy(GOOD_S2)
        report["ranks"][0]["hidden_syncs"].append(site("cudaStreamSynchronize()", S2, 9, 20))
        code, line = self.check("S2", report)
        self.assertEqual(code, 1)
        self.assertIn("unexpected hidden_syncs 'cudaStreamSynchronize()' x20 at s02_upload.py:9 (PLANT upload_async)",
                      line)

    def test_wrong_count_fails(self):
        report = copy.deepcopy(GOOD_S2)
        report["ranks"][0]["copies"][1]["calls"] = 19
        self.assertEqual(self.check("S2", report),
                         (1, "S2 FAIL: rank 0: copies direction=h2d host_memory=pinned: 19 calls, expected 20"))

    def test_run_that_failed_fails(self):
        code, line = self.check("S2", GOOD_S2, "--exit-status", "134")
        self.assertEqual((code, line), (1, "S2 FAIL: the run exited with status 134"))

    def test_waits_straggler_and_hangs(self):
        report = copy.deepcopy(GOOD_S10)
        report["collective_waits"]["straggler"] = None
        report["collective_waits"]["inconsistent"] = 30
        report["hangs"] = [{"message": "ncclAllReduce #4: rank 1 never entered it"}]
        code, line = self.check("S10", report)
        self.assertEqual(code, 1)
        self.assertEqual(line, "S10 FAIL: straggler rank None, expected 1 | collective_waits.inconsistent = 30, "
                               "expected 0 | unexpected hang: ncclAllReduce #4: rank 1 never entered it")

    @staticmethod
    def checker(report, checks):
        """The failures of checks on report, from check-scenario's Checker itself."""
        checker = load_script(CHECK).Checker(report, "s02_upload.py", {})
        checker.run(checks)
        return checker.failures

    def test_findings_by_kind(self):
        report = copy.deepcopy(GOOD_S2)
        report["findings"] = [{"kind": "fp32_gemm", "rank": None, "message": "89 % of GPU time in FP32 GEMMs"}]
        self.assertEqual(self.checker(report, [{"finding": "fp32_gemm"}, {"no_finding": "pageable_copy"}]), [])
        failures = self.checker(report, [{"finding": "pageable_copy"}, {"no_finding": "fp32_gemm"},
                                         {"finding": "fp32_gemm", "rank": 1}])
        self.assertEqual(failures, ["no pageable_copy finding",
                                    "unexpected fp32_gemm finding: 89 % of GPU time in FP32 GEMMs",
                                    "no fp32_gemm finding on rank 1"])

    def test_top_kernel(self):
        report = copy.deepcopy(GOOD_S2)
        report["ranks"][0]["gpu"] = {"top_kernels": [{"name": "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_tn"}]}
        self.assertEqual(self.checker(report, [{"top_kernel": "^nvjet_tst_"}]), [])
        self.assertEqual(self.checker(report, [{"top_kernel": "^sm90_xmma_gemm_f32f32"}]),
                         ["rank 0: longest kernel 'nvjet_tst_128x256_64x4_2x1_v_bz_coopA_tn', expected one matching "
                          "'^sm90_xmma_gemm_f32f32'"])

    def test_setup_item(self):
        report = copy.deepcopy(GOOD_S2)
        report["setup"] = [{"rank": 0, "item": "pinned_memory", "observed": "6 of 16 H2D copies from pageable memory",
                            "ok": False}]
        self.assertEqual(self.checker(report, [{"setup": "pinned_memory", "ok": False}]), [])
        self.assertEqual(self.checker(report, [{"setup": "pinned_memory", "ok": True}, {"setup": "numa", "ok": True}]),
                         ["rank 0: setup pinned_memory ok = False (6 of 16 H2D copies from pageable memory), "
                          "expected True", "no setup item numa"])

    def test_job_output_with_and_without_trainshim(self):
        module = load_script(RUN)
        ranks = "[default0]:rank 0: 20 steps done\n[default1]:rank 1: 20 steps done\n"
        self.assertTrue(module.same_output(ranks, "[default1]:rank 1: 20 steps done\n[default0]:rank 0: 20 steps done\n"))
        # The launcher's --tee 3 keeps each rank's lines whole: lines run together are a difference.
        self.assertFalse(module.same_output(ranks, "[default0]:rank 0: 20 steps done[default1]:rank 1: 20 steps done\n\n"))
        self.assertFalse(module.same_output(ranks, "[default0]:rank 1: 20 steps done\n[default1]:rank 0: 20 steps done\n"))
        self.assertFalse(module.same_output(ranks, "[default0]:rank 0: 20 steps done\n"))
        self.assertFalse(module.same_output(ranks, "[default0]:rank 0: 20 steps done\n[default1]:rank 1: 19 steps done\n"))
        command = module.command_of({"script": "job.py", "ranks": 2}, argparse.Namespace(
            expected="/x/expected.json", python="python3", launcher="torchrun"))
        self.assertEqual(command[command.index("--tee") + 1], "3")

    def test_gpu_timeline_state(self):
        report = copy.deepcopy(GOOD_S2)
        report["ranks"][0]["gpu"] = {"timeline": "taken"}
        self.assertEqual(self.checker(report, [{"gpu_timeline": "taken"}]), [])
        self.assertEqual(self.checker(report, [{"gpu_timeline": "yielded"}]),
                         ["rank 0: GPU timeline 'taken', expected 'yielded'"])

    def test_inconsistent_is_checked_only_where_reported(self):
        report = copy.deepcopy(GOOD_S10)
        del report["collective_waits"]["inconsistent"]
        self.assertEqual(self.check("S10", report)[0], 0)

    def test_twin_saving_against_the_prediction(self):
        check_twin = load_script(CHECK).check_twin
        item = {"cause": "hidden_sync", "title": "Tensor.item() at /job/train.py:73 in main", "rank": None,
                "cost_ns_per_step": 9_000_000, "predicted_step_ns": 37_000_000}
        other = dict(item, title="Tensor.item() at /job/train.py:61 in main", predicted_step_ns=45_000_000)
        planted = {"job": {"step_ns": 46_000_000}, "root_causes": [other, item]}
        twin = {"name": "no_item", "fixes": {"cause": "hidden_sync", "plant": "item"}}

        def fixed(step_ms, *causes):
            return {"job": {"step_ns": step_ms * 1_000_000}, "root_causes": list(causes)}

        # Predicted 9 ms, measured 10.5 (within 2 ms) or 11.2 (2.2 ms off, within 20 % of it: 2.24 ms).
        self.assertEqual(check_twin(twin, planted, fixed(35.5), {"item": 73}, "train.py")[0], [])
        self.assertEqual(check_twin(twin, planted, fixed(34.8), {"item": 73}, "train.py")[0], [])
        failures, _ = check_twin(twin, planted, fixed(41), {"item": 73}, "train.py")
        self.assertEqual(failures, ["predicted saving 9.0 ms, measured 5.0 ms (step 46.0 ms, predicted 37.0 ms "
                                    "without hidden_sync, the twin measured 41.0 ms)"])
        # The other line's item() is not the fixed cause; the fixed one left in the twin at 5 % is.
        left = dict(item, cost_ns_per_step=2_000_000)
        self.assertEqual(check_twin(twin, planted, fixed(36, other), {"item": 73}, "train.py")[0], [])
        self.assertEqual(check_twin(twin, planted, fixed(36, left), {"item": 73}, "train.py")[0],
                         ["the fixed cause is still predicted to save 2.0 ms of the twin's 36.0 ms step"])
        # What the fix leaves of a cause may be real: a loader with no decode still fetches its batch in
        # the main thread (2.1 ms of a 23.4 ms step, where the decode cost 62 ms): a tenth of the planted
        # cost is allowed, not more.
        loader_planted = {"job": {"step_ns": 83_000_000}, "root_causes": [dict(item, predicted_step_ns=21_000_000)]}
        self.assertEqual(check_twin(twin, loader_planted, fixed(23.4, dict(item, cost_ns_per_step=2_100_000)),
                                    {"item": 73}, "train.py")[0], [])
        self.assertEqual(check_twin(twin, loader_planted, fixed(23.4, dict(item, cost_ns_per_step=6_300_000)),
                                    {"item": 73}, "train.py")[0],
                         ["the fixed cause is still predicted to save 6.3 ms of the twin's 23.4 ms step"])
        self.assertEqual(check_twin(twin, planted, fixed(36), {"item": 61}, "train.py")[0],
                         ["predicted saving 1.0 ms, measured 10.0 ms (step 46.0 ms, predicted 45.0 ms without "
                          "hidden_sync, the twin measured 36.0 ms)"])
        self.assertEqual(check_twin(twin, {"job": {"step_ns": 46_000_000}}, fixed(36), {"item": 73}, "train.py")[0],
                         ['the planted run names no cause {"cause": "hidden_sync", "plant": "item"}'])

    def test_a_missed_twin_is_measured_once_more(self):
        module = load_script(CHECK)
        twin = {"fixes": {"cause": "input"}}
        cause = {"cause": "input", "rank": None, "cost_ns_per_step": 30_000_000, "predicted_step_ns": 20_000_000}
        planted = {"job": {"step_ns": 50_000_000}, "root_causes": [cause]}
        twins = iter([41_000_000, 21_000_000, 41_000_000, 41_000_000])  # a miss, then a hit; two misses
        calls, missed = [], []

        def measure(fixed):
            calls.append(fixed)
            return {"job": {"step_ns": next(twins)}, "root_causes": []} if fixed else planted

        self.assertEqual(module.check_twin_measured(twin, planted, measure, {}, "x.py", missed.append)[0], [])
        self.assertEqual((calls, len(missed)), ([True, False, True], 1))
        failures, _ = module.check_twin_measured(twin, planted, measure, {}, "x.py", missed.append)
        self.assertEqual(len(failures), 1)
        self.assertEqual(len(missed), 2)

    def test_a_twin_within_the_planted_jobs_own_spread_is_no_miss(self):
        # The bundled example's pinned twin: predicted 0.6 ms; the planted job measured 50.2 then
        # 46.6 ms with nothing changed, the twin 45.6 then 48.6 ms.
        module = load_script(CHECK)
        twin = {"fixes": {"cause": "pageable_input"}}

        def planted(step_ms):
            cause = {"cause": "pageable_input", "rank": None, "cost_ns_per_step": 600_000,
                     "predicted_step_ns": int((step_ms - 0.6) * 1e6)}
            return {"job": {"step_ns": int(step_ms * 1e6)}, "root_causes": [cause]}

        def measurements(*steps_ms):
            runs = iter(steps_ms)

            def measure(fixed):
                step = next(runs)
                return {"job": {"step_ns": int(step * 1e6)}, "root_causes": []} if fixed else planted(step)
            return measure

        failures, summary = module.check_twin_measured(twin, planted(50.2), measurements(45.6, 46.6, 48.6), {},
                                                       "x.py", lambda f: None)
        self.assertEqual(failures, [])
        self.assertTrue(summary.endswith("the planted job measured 3.6 ms apart in two runs"), summary)
        # A miss beyond the spread still fails: the planted job measured the same twice.
        failures, _ = module.check_twin_measured(twin, planted(50.2), measurements(45.6, 50.0, 45.0), {}, "x.py",
                                                 lambda f: None)
        self.assertEqual(len(failures), 1)
        self.assertIn("measured 5.0 ms", failures[0])

    def test_run_scenarios_measures_a_missed_twin_again_allowing_for_the_spread(self):
        # R9's pinned twin as run-scenarios runs it: a miss, then the planted job and the twin again,
        # judged allowing for how far apart the planted job's two runs measured.
        module = load_script(RUN)
        scenario = {"id": "R9", "script": "../../scripts/examples/train.py"}
        twin = {"name": "pinned", "env": {"TRAIN_PIN_MEMORY": "1"}, "fixes": {"cause": "pageable_input"}}
        args = types.SimpleNamespace(expected=os.path.join(ROOT, "tests", "realtorch", "expected.json"))
        with tempfile.TemporaryDirectory() as scratch:
            def report(name, step_ms, planted):
                causes = ([{"cause": "pageable_input", "rank": None, "cost_ns_per_step": 600_000,
                            "predicted_step_ns": int((step_ms - 0.6) * 1e6)}] if planted else [])
                path = os.path.join(scratch, name)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"job": {"step_ns": int(step_ms * 1e6)}, "root_causes": causes}, f)
                return path

            runs = iter([("pinned", 45.6, False), ("planted", 46.6, True), ("pinned", 48.6, False)])
            envs = []

            def shimmed_run(label, command, env, *rest):
                name, step_ms, planted = next(runs)
                envs.append((label, env.get("TRAIN_PIN_MEMORY")))
                return report(f"{name}{len(envs)}.json", step_ms, planted), "", 0, "", 1.0, ""

            module.shimmed_run = shimmed_run
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                outcome = module.run_twin(scenario, twin, report("first.json", 50.2, True), [], {}, args, {}, scratch)
        self.assertEqual(outcome, "pass")
        self.assertEqual(envs, [("R9[pinned]", "1"), ("R9", None), ("R9[pinned]", "1")])
        lines = printed.getvalue().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].startswith("R9[pinned] FAIL: predicted saving 0.6 ms, measured 4.6 ms"), lines[0])
        self.assertTrue(lines[0].endswith("[measured again]"), lines[0])
        self.assertTrue(lines[1].startswith("R9[pinned] PASS (") and
                        lines[1].endswith("the planted job measured 3.6 ms apart in two runs)"), lines[1])

    def test_twin_from_the_command_line(self):
        expected = os.path.join(ROOT, "tests", "realtorch", "expected.json")
        planted = {"format": "trainshim-report/1", "job": {"step_ns": 45_000_000},
                   "root_causes": [{"cause": "input_pipeline", "rank": 1, "cost_ns_per_step": 30_000_000,
                                    "predicted_step_ns": 15_000_000}]}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"job": {"step_ns": 17_000_000}, "root_causes": []}, f)
        try:
            self.assertEqual(self.check("R9", planted, "--expected", expected, "--twin", "fast_loader", f.name),
                             (0, "R9[fast_loader] PASS (step 45.0 ms, predicted 15.0 ms without input_pipeline, "
                                 "the twin measured 17.0 ms)"))
            self.assertEqual(self.check("R9", planted, "--expected", expected, "--twin", "no_such", f.name)[0], 2)
        finally:
            os.unlink(f.name)

    def test_input_errors(self):
        self.assertEqual(self.check("S11", GOOD_S2)[0], 2)
        self.assertEqual(self.check("S2", {"format": "something-else"})[0], 2)


if __name__ == "__main__":
    unittest.main()
