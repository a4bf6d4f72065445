#!/usr/bin/env python3
"""op_sequences.py record OUT.json | check EXPECTED.json  [--build DIR] [--python PY]

The CUDA calls trainshim records for each operation of r01_ops.py (the syncs and copies a user
writes) and train_ops.py (pinning, a pinning DataLoader, nn.Linear, SGD and AdamW steps, an
all-reduce), each at a line marked # PLANT, in the order the op makes them: runs each script
under `trainshim run` with the Python that imports torch, then reads the run database. Per plant, each
distinct recorded call (API, copy direction, host memory) that carries the op's line in its Python
stack, ordered by its first call, with its calls per op (the plant runs STEPS times). Calls that
carry no stack (a pinned copy that waits for nothing) are not attributed to a line: an op made only
of those has an empty sequence (item()'s copy into a pinned buffer is one). The sampler's records
are not calls.
  record: writes the sequences (tests/realtorch/op_sequences.json holds the simulated GPU's);
  check:  compares them with EXPECTED and prints each plant that differs; exit 1 if any does.
On the simulated GPU CTest runs `check` (realtorch_op_sequences); scripts/gpu-check runs it on a
GPU machine, where a difference is what the simulation gets wrong.
"""
import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = ("r01_ops.py", "train_ops.py")
PLANT = re.compile(r"#\s*PLANT\s+(\w+)")
STEPS = re.compile(r"^STEPS\s*=\s*(\d+)", re.M)


def plants_and_steps(script):
    with open(script, encoding="utf-8") as f:
        text = f.read()
    lines = {number: m.group(1) for number, line in enumerate(text.splitlines(), 1) if (m := PLANT.search(line))}
    return lines, int(STEPS.search(text).group(1))


def record_script(build, python, script):
    """The sequences of one script's plants."""
    lines, steps = plants_and_steps(script)
    with tempfile.TemporaryDirectory(prefix="trainshim-ops-") as scratch:
        db = os.path.join(scratch, "ops.db")
        run = subprocess.run([os.path.join(build, "bin", "trainshim"), "run", "--out", db, "--", python, script],
                             capture_output=True, text=True, check=False, cwd=scratch,
                             env=dict(os.environ, TRAINSHIM_JOB=f"op_sequences_{os.getpid()}"))
        if run.returncode != 0:
            sys.exit(f"op_sequences: {os.path.basename(script)} under trainshim exited {run.returncode}: "
                     f"{run.stderr[-500:]}")
        con = sqlite3.connect(db)
        rows = con.execute(
            "SELECT a.name, d.name, m.name, c.count, f.line, c.first_begin_ns FROM calls c "
            "JOIN apis a ON a.id = c.api JOIN directions d ON d.id = c.direction "
            "JOIN host_memories m ON m.id = c.host_memory "
            "JOIN python_frames f ON f.process_id = c.process_id AND f.stack_id = c.python_stack "
            "WHERE c.python_stack != 0 AND a.class IN ('copy', 'sync', 'free', 'poll', 'pinned_alloc', "
            "'pinned_register', 'pinned_free', 'collective') AND (f.file = ? OR f.file LIKE ?) "
            "ORDER BY c.first_begin_ns",
            (script, "%/" + os.path.basename(script))).fetchall()
        con.close()
    sequences = {name: [] for name in sorted(lines.values())}
    for api, direction, memory, count, line, _ in rows:
        if line not in lines:
            continue
        per_op = count / steps
        entry = {"api": api, "direction": direction, "host_memory": memory,
                 "per_op": int(per_op) if per_op == int(per_op) else round(per_op, 2)}
        sequence = sequences[lines[line]]
        same = next((e for e in sequence if {k: e[k] for k in ("api", "direction", "host_memory")} ==
                     {k: entry[k] for k in ("api", "direction", "host_memory")}), None)
        if same:  # another stack (another native caller) of the same call at the same line
            same["per_op"] = round(same["per_op"] + entry["per_op"], 2)
        else:
            sequence.append(entry)
    return sequences


def record(build, python):
    scripts = {}
    for name in SCRIPTS:
        script = os.path.join(HERE, name)
        scripts[name] = {"steps": plants_and_steps(script)[1], "sequences": record_script(build, python, script)}
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, check=False).stdout.strip()
    return {"format": "trainshim-op-sequences/2", "torch": version, "scripts": scripts}


def describe(sequence):
    return ", ".join(f"{e['api']}({e['direction']}, {e['host_memory']}) x{e['per_op']}" for e in sequence) or "nothing"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("record", "check"))
    parser.add_argument("file")
    parser.add_argument("--build", default=os.environ.get("TRAINSHIM_BUILD", os.path.join(ROOT, "build")))
    parser.add_argument("--python", default="python3", help="the Python that imports torch")
    args = parser.parse_args()
    python = os.path.abspath(args.python) if os.sep in args.python else args.python  # it runs elsewhere
    got = record(os.path.abspath(args.build), python)
    if args.mode == "record":
        with open(args.file, "w", encoding="utf-8") as f:
            f.write(json.dumps(got, indent=2) + "\n")
        return 0
    with open(args.file, encoding="utf-8") as f:
        expected = json.load(f)
    differing = total = 0
    for name in sorted(set(expected["scripts"]) | set(got["scripts"])):
        want_script = expected["scripts"].get(name, {}).get("sequences", {})
        have_script = got["scripts"].get(name, {}).get("sequences", {})
        for plant in sorted(set(want_script) | set(have_script)):
            total += 1
            want, have = want_script.get(plant), have_script.get(plant)
            if want != have:
                differing += 1
                print(f"{name} {plant}: expected {describe(want or [])}; got {describe(have or [])}")
    print(f"op sequences: {total - differing} of {total} as expected "
          f"(torch {got['torch']}, expected from torch {expected.get('torch')})")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
