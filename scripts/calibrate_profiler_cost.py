"""Calibrate the profiler's cost per recorded host event (traceanalyzer.classify.profiler_cost)
on recordings with ground truth, and print each run's error and the leave-one-out error.

Usage: python scripts/calibrate_profiler_cost.py DIR [DIR ...]

Each DIR holds one run: ``rank0.pt.trace.json.gz`` (a profiled trace) and ``truth.json`` with
``step_s_median`` (the median step timed without the profiler), as the shared H200 recordings
have them (``capture.py``). The model has one free parameter here: the scale of the costs per
event (cpu_op with the run's options, runtime call, annotation), fitted by least squares of the
relative error of the median unprofiled estimate over the runs; the leave-one-out error refits
without each run in turn and predicts it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

import traceanalyzer as ta
from traceanalyzer.classify import profiler_cost as pc
from traceanalyzer.parsers.kineto_header import profiler_options

SCALES = np.round(np.arange(0.50, 1.51, 0.05), 2)


def main(dirs: list[str]) -> None:
    runs = {}
    for d in map(Path, dirs):
        trace = next(d.glob("*.pt.trace.json*"))
        a = ta.analyze(ta.load(trace))
        opts = sorted(set(profiler_options(trace)) | set(pc.infer_options(a.trace.events)))
        truth = json.loads((d / "truth.json").read_text())
        runs[d.name] = (a.trace.events, a.windows, opts, truth["step_s_median"], a.steps["duration_ns"].median() / 1e9)
    err: dict[float, dict[str, float]] = {}
    for k in SCALES:
        err[k] = {}
        for name, (ev, win, opts, truth, _) in runs.items():
            costs = {kind: v * k for kind, v in pc.event_costs(opts).items()}
            got = pc.profiler_cost(ev, win, {0: opts}, costs, gains=False)
            err[k][name] = statistics.median(got["unprofiled_estimate_ns"].to_list()) / 1e9 / truth - 1

    def fit(names):
        return min(SCALES, key=lambda k: sum(err[k][n] ** 2 for n in names))

    best = fit(list(runs))
    print(f"fitted scale {best:.2f} of the default costs {pc.event_costs(['record_shapes', 'profile_memory', 'with_flops'])}")
    print(f"{'run':<12}{'profiled ms':>12}{'estimate ms':>13}{'truth ms':>10}{'error':>9}{'LOO scale':>11}{'LOO error':>11}")
    for name, (_, _, _, truth, prof) in runs.items():
        k = fit([n for n in runs if n != name])
        print(f"{name:<12}{1e3 * prof:>12.2f}{1e3 * truth * (1 + err[1.0][name]):>13.2f}{1e3 * truth:>10.2f}"
              f"{100 * err[1.0][name]:>8.1f}%{k:>11.2f}{100 * err[k][name]:>10.1f}%")
    for k in SCALES:
        print(f"scale {k:.2f}: " + ", ".join(f"{n} {100 * e:+.1f}%" for n, e in err[k].items()))


if __name__ == "__main__":
    main(sys.argv[1:])
