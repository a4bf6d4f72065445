#!/usr/bin/env python3
"""check_scrape.py SCENARIO TRAINSHIM

A planted job recorded on the simulated GPU, its database served by `trainshim metrics --listen`,
scraped by Debian's Prometheus on loopback with the rules of scripts/prometheus, and asked in PromQL
what an operator would ask:
  straggler  tests/python/straggler.py, 4 ranks, rank 2 loads slowly: trainshim_straggler_rank is 2,
             rank 2 has the highest straggler score, and the others' waits are for rank 2.
  hang       tests/python/hang.py, 4 ranks, rank 1 never enters the fourth all-reduce: while the job
             hangs (the exporter reads the database the collector goes on writing), the alert
             TrainshimRankMissingFromCollective fires for rank 1, and for no other rank.
Every process it starts (the job, the exporter, Prometheus) is stopped when it ends. Exit status 0
when every check holds; one line per failed check. The simulated runtime and the torch stand-in
come from the environment (LD_LIBRARY_PATH, PYTHONPATH), as CTest sets them.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command, env=None, log=None):
    """A process in its own session, so that stopping it stops what it started."""
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                            start_new_session=True)


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    return body["data"]["result"] if body.get("status") == "success" else []


def wait_for(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except OSError:
            pass  # Prometheus or the exporter not listening yet
        time.sleep(0.5)
    raise TimeoutError(f"{what} after {seconds} s")


def exporter_port(log_path):
    """The port `trainshim metrics --listen 127.0.0.1:0` says it took."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        found = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", f.read())
    return int(found.group(1)) if found else None


def main():
    scenario, trainshim = sys.argv[1], sys.argv[2]
    scratch = tempfile.mkdtemp(prefix="trainshim-scrape-")
    processes = []
    failures = []
    try:
        db = os.path.join(scratch, "run.db")
        env = dict(os.environ, TRAINSHIM_GPU_PERIOD_MS="0")
        job_log = open(os.path.join(scratch, "job.out"), "w")
        simrun = [os.path.join(ROOT, "scripts", "simrun"), "-n", "4", "--", "python3"]
        run = [trainshim, "run", "--no-report", "--out", db, "--"]
        if scenario == "straggler":
            env["STRAGGLER_DELAY_MS"] = "30"
            job = start(run + simrun + [os.path.join(ROOT, "tests", "python", "straggler.py")], env, job_log)
            if job.wait(240) != 0:
                print(f"the straggler job failed: {open(job_log.name).read()[-2000:]}")
                return 1
        elif scenario == "hang":
            env["TRAINSHIM_HANG_S"] = "2"
            processes.append(start(run + simrun + [os.path.join(ROOT, "tests", "python", "hang.py")], env, job_log))
        else:
            print(f"check_scrape.py: no scenario {scenario} (straggler, hang)")
            return 2

        exporter_log = os.path.join(scratch, "exporter.out")
        with open(exporter_log, "w") as log:
            processes.append(start([trainshim, "metrics", db, "--listen", "127.0.0.1:0", "--interval", "1"], log=log))
        metrics_port = wait_for("trainshim metrics named no port", lambda: exporter_port(exporter_log), 60)

        prometheus_port = free_port()
        config = os.path.join(scratch, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {os.path.join(ROOT, "scripts", "prometheus", "trainshim.rules.yml")}
scrape_configs:
  - job_name: trainshim
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{metrics_port}"]
""")
        with open(os.path.join(scratch, "prometheus.out"), "w") as log:
            processes.append(start(["prometheus", f"--config.file={config}",
                                    f"--storage.tsdb.path={os.path.join(scratch, 'tsdb')}",
                                    f"--web.listen-address=127.0.0.1:{prometheus_port}"], log=log))

        if scenario == "straggler":
            straggler = wait_for("no trainshim_straggler_rank scraped",
                                 lambda: query(prometheus_port, "trainshim_straggler_rank"), 90)
            value = straggler[0]["value"][1]
            print(f"trainshim_straggler_rank = {value}")
            if value != "2":
                failures.append(f"trainshim_straggler_rank is {value}, the planted straggler is rank 2")
            top = query(prometheus_port, "topk(1, trainshim_straggler_score)")
            print(f"topk(1, trainshim_straggler_score) = {[(r['metric'].get('rank'), r['value'][1]) for r in top]}")
            if not top or top[0]["metric"].get("rank") != "2":
                failures.append(f"the highest straggler score is not rank 2's: {top}")
            waited = query(prometheus_port, "topk(1, sum by (waited_for) (trainshim_collective_wait_seconds_total))")
            print(f"topk(1, sum by (waited_for) (...wait_seconds_total)) = "
                  f"{[(r['metric'].get('waited_for'), r['value'][1]) for r in waited]}")
            if not waited or waited[0]["metric"].get("waited_for") != "2":
                failures.append(f"the ranks did not wait most for rank 2: {waited}")
        else:
            firing = 'ALERTS{alertname="TrainshimRankMissingFromCollective",alertstate="firing"}'
            alerts = wait_for("TrainshimRankMissingFromCollective did not fire", lambda: query(prometheus_port, firing), 120)
            ranks = sorted(a["metric"].get("rank") for a in alerts)
            print(f"{firing}: ranks {ranks}")
            if ranks != ["1"]:
                failures.append(f"the alert fired for ranks {ranks}, rank 1 is the one missing")
    except TimeoutError as e:
        failures.append(str(e))
    finally:
        for process in reversed(processes):
            stop(process)
        if failures:
            for name in ("job.out", "exporter.out", "prometheus.out"):
                path = os.path.join(scratch, name)
                if os.path.exists(path):
                    print(f"--- {name} (end)\n{open(path, errors='replace').read()[-1500:]}")
        shutil.rmtree(scratch, ignore_errors=True)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
