#!/usr/bin/env python3
"""check_fleet_docs.py PROMTOOL PROMETHEUS

The YAML examples of docs/fleet.md, read by what reads them in a cluster:
  - every Kubernetes manifest validates against the Kubernetes API's schema (kubernetes-validate,
    strict: a misspelt field is an error, as `kubectl apply --validate=strict` makes it);
  - every Prometheus configuration passes `promtool check config`, its rule file
    scripts/prometheus/trainshim.rules.yml. Debian's Prometheus is built without Kubernetes
    discovery: there a `kubernetes_sd_configs` gives way to the targets a pod discovery gives, with
    their labels (PODS), and a real Prometheus, started on loopback, shows that its relabelling
    keeps the running pods' `trainshim` ports alone, IPv4 and IPv6;
  - a container that exports trainshim's metrics (TRAINSHIM_METRICS=HOST:PORT; the page has one at
    least) declares that port, named `trainshim`, and sets TRAINSHIM_JOB (one job label on every
    node) and a /dev/shm of its own (the container's default is 64 MiB).
Runs with the venv of scripts/install-pytools (PyYAML, kubernetes-validate). Exit status 0 when every
check holds; one line per failed check.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import kubernetes_validate
import kubernetes_validate.utils
import yaml

from check_scrape import free_port, start, stop, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBERNETES_VERSION = "1.31.0"  # batch.kubernetes.io/job-name, the pods' label, is there since 1.27


def yaml_blocks(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [m.group(1) for m in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M)]


def discovered(port_name, phase):
    """The labels Kubernetes' pod discovery gives the target of a declared container port."""
    return {"__meta_kubernetes_pod_container_port_name": port_name, "__meta_kubernetes_pod_phase": phase}


# The targets pod discovery makes of four pods' declared container ports, by address (the pod's,
# with the port); the relabelling must keep the running pods' ports named trainshim alone.
PODS = {"10.0.0.2:9464": discovered("trainshim", "Running"), "[fd00::5]:9464": discovered("trainshim", "Running"),
        "10.0.0.3:8080": discovered("http", "Running"), "10.0.0.4:9464": discovered("trainshim", "Succeeded")}
KEPT = ["10.0.0.2:9464", "[fd00::5]:9464"]


def without_kubernetes_discovery(config):
    """`config` with the targets of PODS in place of each scrape job's Kubernetes discovery."""
    scrapes = []
    for scrape in config.get("scrape_configs", []):
        if "kubernetes_sd_configs" in scrape:
            scrape = {k: v for k, v in scrape.items() if k != "kubernetes_sd_configs"}
            scrape["static_configs"] = [{"targets": [address], "labels": labels} for address, labels in PODS.items()]
        scrapes.append(scrape)
    return dict(config, scrape_configs=scrapes)


def targets_kept(prometheus_binary, config_path, scratch):
    """The addresses of the targets a Prometheus of `config_path` keeps after relabelling."""
    port = free_port()
    with open(os.path.join(scratch, "prometheus.out"), "w") as log:
        prometheus = start([prometheus_binary, f"--config.file={config_path}",
                            f"--storage.tsdb.path={os.path.join(scratch, 'tsdb')}",
                            f"--web.listen-address=127.0.0.1:{port}"], log=log)
    try:
        def active():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as response:
                return json.load(response)["data"]["activeTargets"]

        return sorted(t["labels"]["instance"] for t in wait_for("Prometheus kept no target", active, 60))
    finally:
        stop(prometheus)


def check_prometheus_config(config, promtool, prometheus, failures, n):
    rules = os.path.join(ROOT, "scripts", "prometheus", "trainshim.rules.yml")
    discovers_pods = any("kubernetes_sd_configs" in s for s in config.get("scrape_configs", []))
    config = dict(without_kubernetes_discovery(config), rule_files=[rules for _ in config.get("rule_files", [])])
    scratch = tempfile.mkdtemp(prefix="trainshim-fleet-docs-")
    try:
        path = os.path.join(scratch, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        checked = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
        print(f"block {n}: promtool check config: exit {checked.returncode}")
        if checked.returncode != 0:
            failures.append(f"block {n}: promtool check config: {checked.stdout}{checked.stderr}")
        elif discovers_pods:
            try:
                kept = targets_kept(prometheus, path, scratch)
            except TimeoutError:
                kept = []  # none, after a minute
            print(f"block {n}: of the pods' ports {sorted(PODS)}, Prometheus scrapes {kept}")
            if kept != KEPT:
                failures.append(f"block {n}: the relabelling keeps {kept}, not the running pods' trainshim ports {KEPT}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for scrape in config.get("scrape_configs", []):
        if not scrape.get("honor_labels"):
            failures.append(f"block {n}: scrape job {scrape.get('job_name')} lacks honor_labels: true")


def pod_templates(manifest):
    spec = manifest.get("spec", {})
    if manifest["kind"] == "Pod":
        return [manifest]
    if "template" in spec:
        return [spec["template"]]
    return []


def check_exporting_pod(template, failures, where):
    """The number of containers of the pod that export trainshim's metrics."""
    exporting = 0
    for container in template["spec"]["containers"]:
        env = {e["name"]: e for e in container.get("env", [])}
        metrics = env.get("TRAINSHIM_METRICS", {}).get("value", "")
        if not metrics:
            continue
        exporting += 1
        if not re.fullmatch(r"[^:]+:\d+", metrics):
            failures.append(f"{where}: TRAINSHIM_METRICS={metrics} is not HOST:PORT")
            continue
        port = int(metrics.rsplit(":", 1)[1])
        named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        print(f"{where}: container {container['name']} exports on {port}; its ports {named}")
        if named.get("trainshim") != port:
            failures.append(f"{where}: TRAINSHIM_METRICS={metrics} but the port named trainshim is {named.get('trainshim')}")
        if "TRAINSHIM_JOB" not in env:
            failures.append(f"{where}: no TRAINSHIM_JOB: each pod would name a job of its own")
        if not any(m["mountPath"] == "/dev/shm" for m in container.get("volumeMounts", [])):
            failures.append(f"{where}: /dev/shm is the container's default 64 MiB")
    return exporting


def main():
    promtool, prometheus = sys.argv[1], sys.argv[2]
    failures = []
    kinds = []
    exporting = 0
    blocks = yaml_blocks(os.path.join(ROOT, "docs", "fleet.md"))
    for n, block in enumerate(blocks, 1):
        documents = [d for d in yaml.safe_load_all(block) if d]
        for document in documents:
            if "scrape_configs" in document:
                check_prometheus_config(document, promtool, prometheus, failures, n)
                kinds.append("prometheus")
            elif "kind" in document:
                where = f"block {n}: {document['kind']} {document['metadata']['name']}"
                try:
                    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
                    print(f"{where}: valid for Kubernetes {KUBERNETES_VERSION}")
                except kubernetes_validate.ValidationError as e:
                    failures.append(f"{where}: {e.message} at {'.'.join(map(str, e.path))}")
                except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.utils.VersionNotSupportedError) as e:
                    failures.append(f"{where}: no Kubernetes schema to check it: {e}")
                for template in pod_templates(document):
                    exporting += check_exporting_pod(template, failures, where)
                kinds.append(document["kind"])
    if not exporting:
        failures.append("no container of docs/fleet.md's manifests exports trainshim's metrics")
    # The page's examples: two scrape configurations, and the Kubernetes Service and Job.
    if sorted(kinds) != ["Job", "Service", "prometheus", "prometheus"]:
        failures.append(f"docs/fleet.md's YAML examples are {sorted(kinds)}: a check here for each new kind")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
