#!/usr/bin/env python3
"""html_check.py REPORT.html REPORT.json [--screenshot PNG] [--phone-screenshot PNG] [--chromium PATH]
   [--no-browser]

Checks the page `trainshim report --format html` wrote against the JSON report of the same run.
In headless Chromium (through the DevTools protocol): the page loads from disk with no error in
its console, fetches nothing, and on a phone's width (390 px) does not scroll sideways; screenshots
of it at 1,280 px (the whole page) and at 390 px are saved. Then, on the DOM Chromium rendered (with
--no-browser, on the file itself, as scripts/run-scenarios does for every scenario):
  - every section the run calls for is there (the waits with collectives, the hang with a hang);
  - each rank's strip draws the GPU idle share the JSON gives, within 1 % of the step, summed from
    the heights of its bars' parts (a cut bar's at the share it is drawn at);
  - the straggler's imposed-wait bar is the longest, and it is the JSON's straggler;
  - when the job hung and the missing rank's stack was sampled, a frame of the merged stacks is
    that rank's alone.
Exit status 0 when every check holds; one line per failed check.
"""
import argparse
import base64
import html.parser
import json
import os
import shutil
import sys

IDLE_PARTS = ("data_loading", "sync", "pageable_copy", "collective", "host")
RECORDED_PARTS = ("compute", "communication", "waiting") + IDLE_PARTS
PHONE_WIDTH = 390


class ReportPage(html.parser.HTMLParser):
    """What the checks read from the page: sections, strips, imposed-wait bars, flame frames."""

    def __init__(self):
        super().__init__()
        self.sections = []
        self.strips = {}  # pid -> {"rank", "idle_share": attribute, "parts": {part: summed height}}
        self.imposed = {}  # rank -> bar width
        self.frames = []  # (frame, ranks)
        self._strip = None
        self._drawn_at = 1.0  # a cut bar's parts are drawn at this share of their length
        self._imposed_rank = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "id" in a:
            self.sections.append(a["id"])
        elif tag == "svg" and "data-pid" in a:
            self._strip = self.strips.setdefault(int(a["data-pid"]), {"rank": a["data-rank"], "parts": {},
                                                                      "idle_share": float(a["data-idle-share"])})
        elif tag == "g" and self._strip is not None:
            self._drawn_at = float(a.get("data-drawn-at", "1"))
        elif tag == "rect" and self._strip is not None and a.get("class", "").startswith("p-"):
            part = a["class"][2:]
            self._strip["parts"][part] = self._strip["parts"].get(part, 0.0) + float(a["height"]) / self._drawn_at
        elif tag == "g" and "data-imposed-ns" in a:
            self._imposed_rank = int(a["data-rank"])
        elif tag == "rect" and self._imposed_rank is not None:
            self.imposed[self._imposed_rank] = float(a["width"])
            self._imposed_rank = None
        elif tag == "g" and "data-frame" in a:
            self.frames.append((a["data-frame"], a["data-ranks"]))

    def handle_endtag(self, tag):
        if tag == "svg":
            self._strip = None
        elif tag == "g":
            self._drawn_at = 1.0


def check_page(page_html, report):
    """The checks on the page's HTML (as written, or as Chromium rendered it) against the JSON
    report; a list of failures in words."""
    page = ReportPage()
    page.feed(page_html)
    failures = []
    expected = ["verdict", "steps", "syncs", "lost"]
    if report["collective_waits"]["matched"] > 0:
        expected.append("waits")
    if report["hangs"]:
        expected.append("hang")
    if report["setup"]:
        expected.append("setup")
    if any((entry.get("gpu") or {}).get("top_kernels") for entry in report["ranks"]):
        expected.append("kernels")
    failures += [f"no section {s}" for s in expected if s not in page.sections]
    if "hang" in page.sections and not report["hangs"]:
        failures.append("a hang section for a job that did not hang")

    processes = {entry["pid"]: entry for entry in report["ranks"]}
    # A process draws a strip when it has a step whose end is known: two step starts or more.
    stepped = {pid for pid, entry in processes.items() if entry["steps"]["count"] > 1}
    failures += [f"no strip of process {pid}'s steps" for pid in sorted(stepped - set(page.strips))]
    for pid, strip in page.strips.items():
        if pid not in processes:
            failures.append(f"a strip of process {pid}, which the JSON does not have")
            continue
        rank = strip["rank"]
        gpu = processes[pid]["gpu"]
        if gpu["covered_steps"] == 0:  # no GPU timeline: the strip draws the steps not recorded
            if any(strip["parts"].get(p) for p in RECORDED_PARTS):
                failures.append(f"rank {rank}'s strip draws GPU time the GPU timeline did not record")
            continue
        if abs(strip["idle_share"] - gpu["idle_share"]) > 1e-6:
            failures.append(f"rank {rank}'s strip says idle {strip['idle_share']}, the JSON {gpu['idle_share']}")
        recorded = sum(strip["parts"].get(p, 0.0) for p in RECORDED_PARTS)
        drawn = sum(strip["parts"].get(p, 0.0) for p in IDLE_PARTS) / recorded if recorded else 0.0
        if abs(drawn - gpu["idle_share"]) > 0.01:
            failures.append(f"rank {rank}'s strip draws {drawn:.2%} of its steps idle, the JSON says "
                            f"{gpu['idle_share']:.2%}")

    straggler = report["collective_waits"].get("straggler")
    if straggler:
        if not page.imposed:
            failures.append("no imposed-wait bars")
        else:
            longest = max(page.imposed, key=page.imposed.get)
            if longest != straggler["rank"]:
                failures.append(f"the longest imposed-wait bar is rank {longest}'s, the straggler is rank "
                                f"{straggler['rank']}")

    for hang in report["hangs"]:
        sampled = {int(line.split()[1]) for line in hang["stacks"].splitlines() if line.startswith("rank ")}
        for missing in hang["missing_ranks"]:
            if missing in sampled and not any(ranks_of == str(missing) for _, ranks_of in page.frames):
                failures.append(f"no frame of the hung job's stacks is rank {missing}'s alone")
    return failures, page


def in_browser(path, screenshot, phone_screenshot, executable):
    """Loads the page in Chromium: failures of the browser's own checks and the rendered DOM."""
    from browser import chromium, wait_for

    failures = []
    url = "file://" + os.path.abspath(path)
    with chromium(executable, 1280, 900) as page:
        for domain in ("Log.enable", "Network.enable", "Page.enable"):
            page.call(domain)
        page.call("Page.navigate", url=url)
        wait_for("the page did not load", lambda: page.evaluate("document.readyState") == "complete", 60)
        dom = page.evaluate("document.documentElement.outerHTML")
        height = page.evaluate("Math.ceil(document.documentElement.scrollHeight)")
        shot = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1})
        if screenshot:
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        page.call("Emulation.setDeviceMetricsOverride", width=PHONE_WIDTH, height=844, deviceScaleFactor=1,
                  mobile=True)
        page.call("Page.reload")
        wait_for("the page did not load on a phone's width",
                 lambda: page.evaluate("document.readyState") == "complete", 60)
        wide = page.evaluate("document.documentElement.scrollWidth")
        if wide > PHONE_WIDTH:
            failures.append(f"on a phone ({PHONE_WIDTH} px) the page is {wide} px wide: it scrolls sideways")
        if phone_screenshot:
            shot = page.call("Page.captureScreenshot", format="png")
            with open(phone_screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        page.evaluate("1")  # the events sent while the page loaded are read by now
        for method, params in page.events:
            if method == "Runtime.exceptionThrown":
                failures.append(f"the page threw: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                failures.append(f"console error: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                failures.append(f"console error: {params['entry'].get('text')}")
            elif method == "Network.requestWillBeSent" and params["request"]["url"] != url:
                failures.append(f"the page fetched {params['request']['url']}")
    return failures, dom


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page")
    parser.add_argument("report")
    parser.add_argument("--screenshot")
    parser.add_argument("--phone-screenshot")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    failures = []
    if args.no_browser:
        with open(args.page, encoding="utf-8") as f:
            dom = f.read()
    else:
        if not shutil.which(args.chromium):
            print(f"FAIL: no {args.chromium}: run scripts/install-deps")
            return 1
        failures, dom = in_browser(args.page, args.screenshot, args.phone_screenshot, args.chromium)
    checked, page = check_page(dom, report)
    failures += checked
    for failure in failures:
        print(f"FAIL: {failure}")
    where = "" if args.no_browser else " in Chromium"
    print(f"{'FAIL' if failures else 'PASS'}: {args.page}{where}: sections {', '.join(page.sections)}; "
          f"{len(page.strips)} strips; straggler bar {max(page.imposed, key=page.imposed.get, default=None)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
