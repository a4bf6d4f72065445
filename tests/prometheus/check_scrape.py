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
  two_nodes_straggler, two_nodes_hang
             The same jobs over two simulated nodes, each a host of its own: a network namespace
             (ip netns, a veth on a bridge), a host name and a /dev/shm of its own, so its own
             collector, database and exporter, for ranks 0-1 (node-a) and 2-3 (node-b) of one job.
             Prometheus scrapes both over the bridge, from the exporters of the nodes' collectors
             (TRAINSHIM_METRICS in the job's environment), while the job runs. The straggler is
             rank 2, on node-b: while every rank still runs, the rules' recorded collective time
             over both nodes is least for it (every other rank waits for it inside its collectives)
             and TrainshimStragglerAcrossNodes is pending for it alone. The hang is rank 3's, on
             node-b: the alert fires for rank 3 alone, within TRAINSHIM_HANG_S plus 10 s of the
             job's last progress. Needs root.
Every process it starts (the job, the exporter, Prometheus) is stopped when it ends, and the
namespaces are removed. Exit status 0 when every check holds; one line per failed check. The
simulated runtime and the torch stand-in come from the environment (LD_LIBRARY_PATH, PYTHONPATH),
as CTest sets them.
"""
import datetime
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


def query(port, promql, at=None):
    """The instant query's result, now or at Unix time `at`."""
    parameters = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(parameters)
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    return body["data"]["result"] if body.get("status") == "success" else []


class CannotHold(Exception):
    """What a wait was for can no longer happen (not an OSError, which a wait takes for not yet)."""


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


def exporters_reading(directory):
    """The pids of the `trainshim metrics` processes whose command line names `directory`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[1:2] == [b"metrics"] and any(directory.encode() in a for a in argv):
            pids.append(int(pid))
    return pids


def missing_rank_alert(port, rank, failures):
    """Waits for TrainshimRankMissingFromCollective to fire: for `rank`, and for no other."""
    firing = 'ALERTS{alertname="TrainshimRankMissingFromCollective",alertstate="firing"}'
    alerts = wait_for("TrainshimRankMissingFromCollective did not fire", lambda: query(port, firing), 120)
    ranks = sorted(a["metric"].get("rank") for a in alerts)
    print(f"{firing}: ranks {ranks}")
    if ranks != [rank]:
        failures.append(f"the alert fired for ranks {ranks}, rank {rank} is the one missing")


def prometheus_config(path, targets):
    with open(path, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {os.path.join(ROOT, "scripts", "prometheus", "trainshim.rules.yml")}
scrape_configs:
  - job_name: trainshim
    honor_labels: true
    static_configs:
      - targets: {json.dumps(targets)}
""")


def start_prometheus(scratch, targets, processes):
    port = free_port()
    config = os.path.join(scratch, "prometheus.yml")
    prometheus_config(config, targets)
    with open(os.path.join(scratch, "prometheus.out"), "w") as log:
        processes.append(start(["prometheus", f"--config.file={config}",
                                f"--storage.tsdb.path={os.path.join(scratch, 'tsdb')}",
                                f"--web.listen-address=127.0.0.1:{port}"], log=log))
    return port


class Nodes:
    """Two simulated hosts: network namespaces on a bridge of the test's own (10.213.N.0/24, N from
    the test's pid), node-a at .2 and node-b at .3; the bridge, at .1, is where Prometheus reaches
    them from. Each node's commands run with a host name and a /dev/shm of their own."""

    def __init__(self):
        self.tag = f"ts{os.getpid() % 100000}"
        self.subnet = f"10.213.{os.getpid() % 250 + 1}"
        self.bridge = self.tag + "br"
        self.names = {"node-a": self.tag + "a", "node-b": self.tag + "b"}
        self.addresses = {"node-a": self.subnet + ".2", "node-b": self.subnet + ".3"}
        self.made = []

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self):
        self.ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        self.ip("addr", "add", self.subnet + ".1/24", "dev", self.bridge)
        self.ip("link", "set", self.bridge, "up")
        for node, ns in self.names.items():
            self.ip("netns", "add", ns)
            self.made.append(("netns", ns))
            host_end, node_end = ns + "h", ns + "n"
            self.ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            self.made.append(("link", host_end))
            self.ip("link", "set", node_end, "netns", ns)
            self.ip("link", "set", host_end, "master", self.bridge)
            self.ip("link", "set", host_end, "up")
            self.ip("-n", ns, "addr", "add", self.addresses[node] + "/24", "dev", node_end)
            self.ip("-n", ns, "link", "set", node_end, "up")
            self.ip("-n", ns, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for kind, name in reversed(self.made):
            subprocess.run(["ip", kind, "del", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def command(self, node, command):
        """`command` run on `node`: in its network namespace, with its host name and its own /dev/shm."""
        return ["ip", "netns", "exec", self.names[node], "unshare", "--mount", "--uts", "sh", "-c",
                f'mount -t tmpfs tmpfs /dev/shm && hostname {node} && exec "$@"', "sh", *command]


def two_nodes(scenario, trainshim, scratch, processes, failures):
    if os.geteuid() != 0:
        failures.append("the two-node scenarios make network namespaces: run them as root")
        return
    with Nodes() as nodes:
        try:
            two_nodes_checks(scenario, trainshim, scratch, processes, failures, nodes)
        finally:  # the processes first, while their namespaces are there
            for process in reversed(processes):
                stop(process)
    # A collector's exporter stops with it once its job has stopped.
    left = exporters_reading(scratch)
    if left:
        failures.append(f"exporters still run after their jobs: {left}")


def two_nodes_checks(scenario, trainshim, scratch, processes, failures, nodes):
    job = f"twonodes{os.getpid()}"
    # What torchrun gives every node's workers alike; simnccl's ranks meet in SIMNCCL_SHM_DIR. The
    # job id every node's `trainshim run` is given, as docs/fleet.md says, is the metrics' job label.
    env = dict(os.environ, TRAINSHIM_GPU_PERIOD_MS="0", MASTER_ADDR=nodes.addresses["node-a"],
               MASTER_PORT=str(free_port()), TORCHELASTIC_RUN_ID=job, SIMNCCL_SHM_DIR=os.path.join(scratch, "simnccl"),
               TRAINSHIM_JOB=job)
    os.makedirs(env["SIMNCCL_SHM_DIR"])
    if scenario == "two_nodes_straggler":
        # About 65 s of steps of 32 ms. The rules' rates are over 5 minutes, and a series younger
        # than that is an increase over 5 minutes: the others' waits of 94 % of their time make
        # the alert's one tenth after about 35 s.
        env.update(STRAGGLER_DELAY_MS="30", STRAGGLER_STEPS="2000")
        script = os.path.join(ROOT, "tests", "python", "straggler.py")
    else:
        env.update(TRAINSHIM_HANG_S="2", HANG_RANK="3")
        script = os.path.join(ROOT, "tests", "python", "hang.py")
    jobs = {}
    targets = [f"{nodes.addresses[node]}:9464" for node in ("node-a", "node-b")]
    for k, node in enumerate(("node-a", "node-b")):
        db = os.path.join(scratch, f"{node}.db")
        command = [trainshim, "run", "--no-report", "--out", db, "--", os.path.join(ROOT, "scripts", "simrun"),
                   "-n", "2", "--nnodes", "2", "--node-rank", str(k), "--", "python3", script]
        node_env = dict(env, TRAINSHIM_METRICS=targets[k], TRAINSHIM_METRICS_INTERVAL="1")
        log = open(os.path.join(scratch, f"{node}.job.out"), "w")
        jobs[node] = start(nodes.command(node, command), node_env, log)
        processes.append(jobs[node])
    port = start_prometheus(scratch, targets, processes)
    def every_rank():
        ended = query(port, f'trainshim_process_ended{{job="{job}"}}')
        return ended if len(ended) == 4 else None

    up = wait_for("Prometheus did not scrape the four ranks of both nodes", every_rank, 90)
    hosts = sorted({(r["metric"]["host"], r["metric"]["rank"]) for r in up})
    print(f"trainshim_process_ended: (host, rank) {hosts}")
    if hosts != [("node-a", "0"), ("node-a", "1"), ("node-b", "2"), ("node-b", "3")]:
        failures.append(f"the nodes' ranks are not 0-1 on node-a and 2-3 on node-b: {hosts}")
    if scenario == "two_nodes_straggler":
        straggler_while_running(port, job, jobs, failures)
    else:
        missing_rank_alert(port, "3", failures)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as response:
            active = [a for a in json.load(response)["data"]["alerts"]
                      if a["labels"]["alertname"] == "TrainshimRankMissingFromCollective"]
        last = query(port, f'max(trainshim_last_progress_timestamp_seconds{{job="{job}"}})')
        active_at = min(datetime.datetime.fromisoformat(a["activeAt"].replace("Z", "+00:00")).timestamp()
                        for a in active)
        after = active_at - float(last[0]["value"][1])
        print(f"the alert was active {after:.1f} s after the job's last progress (TRAINSHIM_HANG_S=2)")
        if after > 2 + 10:
            failures.append(f"the alert fired {after:.1f} s after the last progress, more than TRAINSHIM_HANG_S + 10 s")
        hangs = query(port, f'trainshim_hangs_total{{job="{job}",kind="collective"}}')
        print(f"trainshim_hangs_total{{kind=\"collective\"}} per host: "
              f"{sorted((r['metric'].get('instance'), r['value'][1]) for r in hangs)}")


def straggler_while_running(port, job, jobs, failures):
    """While every rank of the two-node straggler job runs, the rules name rank 2 on node-b."""
    recorded = f'trainshim:collective_exec_seconds:rate5m{{job="{job}"}}'
    # The alert pending while no rank has ended, in one evaluation; a job that ends first fails it.
    pending = ('ALERTS{alertname="TrainshimStragglerAcrossNodes",alertstate="pending",job="%s"} '
               'and on (job) (max by (job) (trainshim_process_ended{job="%s"}) == 0)' % (job, job))

    def pending_while_running():
        if any(j.poll() is not None for j in jobs.values()):
            raise CannotHold("the job ended before TrainshimStragglerAcrossNodes was pending while it ran")
        found = query(port, pending)
        return (found, time.time()) if found else None

    alerts, at = wait_for("TrainshimStragglerAcrossNodes was not pending while the job ran",
                          pending_while_running, 240)
    each = query(port, recorded, at)
    least = query(port, f"bottomk(1, {recorded})", at)
    beyond = query(port, f'avg by (job) (trainshim:collective_wait_beyond_fastest:rate5m{{job="{job}"}})', at)
    print(f"the job's average collective time beyond the fastest rank's: "
          f"{float(beyond[0]['value'][1]) if beyond else float('nan'):.3f} s/s")
    print("collective seconds per second by rank (rate5m): " + ", ".join(
        f"{r['metric']['rank']}@{r['metric']['host']}: {float(r['value'][1]):.3f}"
        for r in sorted(each, key=lambda r: r["metric"]["rank"])))
    print(f"bottomk(1, {recorded}) = {[(r['metric']['rank'], r['metric']['host']) for r in least]}")
    print(f"{pending}: {[(a['metric']['rank'], a['metric']['host']) for a in alerts]}")
    if not least or (least[0]["metric"]["rank"], least[0]["metric"]["host"]) != ("2", "node-b"):
        failures.append(f"the rank with the least collective time is not rank 2 on node-b: {least}")
    if [(a["metric"]["rank"], a["metric"]["host"]) for a in alerts] != [("2", "node-b")]:
        failures.append(f"TrainshimStragglerAcrossNodes is pending for {alerts}, not for rank 2 on node-b alone")
    for node, job_process in jobs.items():
        if job_process.wait(240) != 0:
            failures.append(f"the straggler job on {node} failed")


def one_node(scenario, trainshim, scratch, processes, failures):
    db = os.path.join(scratch, "run.db")
    env = dict(os.environ, TRAINSHIM_GPU_PERIOD_MS="0")
    job_log = open(os.path.join(scratch, "job.out"), "w")
    simrun = [os.path.join(ROOT, "scripts", "simrun"), "-n", "4", "--", "python3"]
    run = [trainshim, "run", "--no-report", "--out", db, "--"]
    if scenario == "straggler":
        env["STRAGGLER_DELAY_MS"] = "30"
        job = start(run + simrun + [os.path.join(ROOT, "tests", "python", "straggler.py")], env, job_log)
        if job.wait(240) != 0:
            failures.append("the straggler job failed")
            return
    else:
        env["TRAINSHIM_HANG_S"] = "2"
        processes.append(start(run + simrun + [os.path.join(ROOT, "tests", "python", "hang.py")], env, job_log))

    exporter_log = os.path.join(scratch, "exporter.out")
    with open(exporter_log, "w") as log:
        processes.append(start([trainshim, "metrics", db, "--listen", "127.0.0.1:0", "--interval", "1"], log=log))
    metrics_port = wait_for("trainshim metrics named no port", lambda: exporter_port(exporter_log), 60)
    prometheus_port = start_prometheus(scratch, [f"127.0.0.1:{metrics_port}"], processes)

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
        # The counters' score over the whole run (a dashboard's rate() of both over a window:
        # trainshim:straggler_score:rate10m, tested by promtool).
        latest = query(prometheus_port, "topk(1, trainshim_collective_lateness_total / trainshim_collective_arrivals_total)")
        print(f"topk(1, lateness_total / arrivals_total) = {[(r['metric'].get('rank'), r['value'][1]) for r in latest]}")
        if not latest or latest[0]["metric"].get("rank") != "2":
            failures.append(f"the counters' lateness is not highest for rank 2: {latest}")
        waited = query(prometheus_port, "topk(1, sum by (waited_for) (trainshim_collective_wait_seconds_total))")
        print(f"topk(1, sum by (waited_for) (...wait_seconds_total)) = "
              f"{[(r['metric'].get('waited_for'), r['value'][1]) for r in waited]}")
        if not waited or waited[0]["metric"].get("waited_for") != "2":
            failures.append(f"the ranks did not wait most for rank 2: {waited}")
    else:
        missing_rank_alert(prometheus_port, "1", failures)


SCENARIOS = {"straggler": one_node, "hang": one_node, "two_nodes_straggler": two_nodes, "two_nodes_hang": two_nodes}


def main():
    scenario, trainshim = sys.argv[1], sys.argv[2]
    if scenario not in SCENARIOS:
        print(f"check_scrape.py: no scenario {scenario} ({', '.join(SCENARIOS)})")
        return 2
    scratch = tempfile.mkdtemp(prefix="trainshim-scrape-")
    processes = []
    failures = []
    try:
        SCENARIOS[scenario](scenario, trainshim, scratch, processes, failures)
    except (TimeoutError, CannotHold) as e:
        failures.append(str(e))
    finally:
        for process in reversed(processes):
            stop(process)
        if failures:
            for name in sorted(os.listdir(scratch)):
                if name.endswith(".out"):
                    print(f"--- {name} (end)\n{open(os.path.join(scratch, name), errors='replace').read()[-1500:]}")
        shutil.rmtree(scratch, ignore_errors=True)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
