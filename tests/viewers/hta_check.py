#!/usr/bin/env python3
"""hta_check.py TRACES_DIR REPORT.json

Loads the Kineto traces `trainshim export --format kineto` wrote (one file per rank) with HTA
(HolisticTraceAnalysis, Meta's analysis of torch.profiler traces) and checks its temporal breakdown
against `trainshim report --json` of the same run, rank by rank, within 2 points of step time:
  idle           HTA's idle time          the report's GPU idle share
  compute        HTA's computation kernels the report's busy share less communication
  communication  HTA's non-compute time    the report's communication share (only NCCL kernels ran)
HTA counts copies and memsets as non-compute, the report counts them in the rank's own GPU work:
where they take more than a point of the step, the two say so differently (docs/formats.md).
Prints each rank's figures side by side. Exit status 0 when every rank agrees; one line per
disagreement. Needs the venv of scripts/install-pytools (HolisticTraceAnalysis).
"""
import json
import logging
import sys

TOLERANCE_POINTS = 2.0


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    traces, report_path = sys.argv[1:]
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as error:
        print(f"FAIL: no HTA ({error}): run scripts/install-pytools")
        return 1
    logging.disable(logging.WARNING)  # HTA warns that no ProfilerStep is in the traces: none is written
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    breakdown = TraceAnalysis(trace_dir=traces).get_temporal_breakdown(visualize=False)
    hta = {int(row["rank"]): row for _, row in breakdown.iterrows()}
    failures, compared = [], 0
    for entry in report["ranks"]:
        rank, gpu = entry["rank"], entry["gpu"]
        if rank is None or gpu["covered_steps"] == 0:
            continue
        if rank not in hta:
            failures.append(f"HTA has no rank {rank}")
            continue
        ours = {"idle": 100 * gpu["idle_share"],
                "compute": 100 * (gpu["busy_share"] - gpu["communication_share"]),
                "communication": 100 * gpu["communication_share"]}
        theirs = {"idle": hta[rank]["idle_time_pctg"], "compute": hta[rank]["compute_time_pctg"],
                  "communication": hta[rank]["non_compute_time_pctg"]}
        print(f"rank {rank}: " + ", ".join(f"{k} {ours[k]:.2f} % (HTA {theirs[k]:.2f} %)" for k in ours))
        compared += 1
        for key, value in ours.items():
            if abs(value - theirs[key]) > TOLERANCE_POINTS:
                failures.append(f"rank {rank}: {key} {value:.2f} % of step time, HTA {theirs[key]:.2f} %")
    if compared == 0:
        failures.append("no rank with the GPU timeline to compare")
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{'FAIL' if failures else 'PASS'}: HTA's temporal breakdown of {traces} against {report_path}: "
          f"{compared} ranks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
