"""The real torch's DataLoader workers, left unnamed as PyTorch before 2.0 left them
(tests/python/sampler_unnamed_workers.py), are counted from the loop they run: the setup
checklist sees 2 workers, not the main thread loading every batch itself. Run by CTest with the
venv's python (scripts/torch-sim), trainshim on PATH."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "tests", "python", "sampler_unnamed_workers.py")

with tempfile.TemporaryDirectory(prefix="trainshim-unnamed-workers-") as scratch:
    # The job's own output apart from the report's.
    result = subprocess.run(["trainshim", "run", "--json", "--out", os.path.join(scratch, "run.db"), "--",
                             "sh", "-c", 'exec "$0" "$@" >/dev/null', sys.executable, JOB],
                            capture_output=True, text=True, timeout=240)
if result.returncode != 0:
    sys.exit(f"exit {result.returncode}: {result.stderr[-2000:]}")
report = json.loads(result.stdout)
items = [s for s in report["setup"] if s["item"] == "dataloader_workers"]
if len(items) != 1 or not items[0]["observed"].startswith("2 workers at most"):
    sys.exit(f"dataloader_workers: {items}")
print(f"dataloader_workers: {items[0]['observed']}")
