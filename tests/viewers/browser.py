"""Headless Chromium driven through the DevTools protocol, for the checks of what users see
(perfetto_check.py, html_check.py)."""
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import websocket


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
        self.events = []  # (method, params) of every event received, in order
        self.call("Runtime.enable")

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if "method" in message:
                self.events.append((message["method"], message.get("params", {})))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def exceptions(self):
        """What the page's scripts threw, in words."""
        return [p["exceptionDetails"].get("text", "exception") for m, p in self.events if m == "Runtime.exceptionThrown"]

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


@contextlib.contextmanager
def chromium(executable, width, height):
    """A headless Chromium with a profile of its own, its page (Page) yielded; the whole process
    group is gone and the profile removed when the block ends."""
    profile = tempfile.mkdtemp(prefix="trainshim-chromium-")
    port = free_port()
    child = subprocess.Popen(
        [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--remote-debugging-port={port}",
         f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield Page(port)
    finally:
        stop_group(child)
        shutil.rmtree(profile, ignore_errors=True)
