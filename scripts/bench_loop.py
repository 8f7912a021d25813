"""Benchmark of the training-loop handler (docs/performance.md, "Training loop").

A CPU training loop (a small MLP, one torch thread, so that a core is left to the rest as on a
training node) fires a trace handler every ``--every`` steps; the "trace" each fire writes is a
real GPU recording (``--trace``, e.g. the shared H200 small trace), so the background analysis
does the work it does in training.

1. Step cost: ``torch.profiler.tensorboard_trace_handler`` and ``on_trace_ready`` fire in turn
   (the same machine load for both), each writing the same trace, each fire once the worker has
   finished the previous trace (as when traces are minutes apart). Printed: the median and 90th
   percentile of the steps in which each fired, their ratio, the steps without a fire and the
   steps right after our fire (while the worker analyses: what the analysis takes from a
   machine with no core to spare).
2. Memory: ``--traces`` traces handed over back to back; the worker's peak RSS (VmHWM) after
   every 10 analysed, and the training process's peak RSS.

    python scripts/bench_loop.py --trace TRACE.pt.trace.json.gz --fires 20 --every 4 --traces 100
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path


class Recorded:
    """A profiler whose ``export_chrome_trace`` writes a recorded trace (the same bytes each time)."""

    def __init__(self, source: Path):
        self.source, self.step_num = source, 0

    def export_chrome_trace(self, path: str, **_: object) -> None:
        shutil.copyfile(self.source, path)


def _rss_kb(pid: int, key: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _idle(handler, n: int) -> None:
    """Wait until the handler's worker has answered ``n`` traces (nothing left in its queue)."""
    while len(handler.results) < n:
        time.sleep(0.01)


def _stats(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return f"median {statistics.median(xs) * 1e3:8.2f} ms  p90 {q[8] * 1e3:8.2f} ms  (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True, help="a recorded GPU trace (.pt.trace.json.gz)")
    ap.add_argument("--fires", type=int, default=20, help="fires of each handler in the step-cost phase")
    ap.add_argument("--every", type=int, default=4, help="steps per fire")
    ap.add_argument("--traces", type=int, default=100, help="traces analysed back to back in the memory phase")
    ap.add_argument("--width", type=int, default=1024, help="the MLP's width (sets the step time)")
    args = ap.parse_args()

    import torch

    from traceanalyzer.integrations.torch import on_trace_ready

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, args.width), torch.randint(0, 10, (256,))

    def step() -> None:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(20):
        step()
    with tempfile.TemporaryDirectory() as tmp:
        tb = torch.profiler.tensorboard_trace_handler(str(Path(tmp) / "tb"), use_gzip=True)
        handler = on_trace_ready(Path(tmp) / "ta", run_id="bench", job="bench")
        prof = Recorded(args.trace)
        # phase 1: the step in which a handler fires, tensorboard's and ours alternately (the same
        # machine load for both), each fire after the worker finished the previous trace
        fired: dict[str, list[float]] = {"tensorboard": [], "traceanalyzer": []}
        calls: dict[str, list[float]] = {"tensorboard": [], "traceanalyzer": []}  # the handler call alone
        after: list[float] = []  # steps right after our fire: the worker analysing meanwhile
        other: list[float] = []
        for j in range(2 * args.fires):
            which = "tensorboard" if j % 2 == 0 else "traceanalyzer"
            _idle(handler, len(fired["traceanalyzer"]))
            for i in range(args.every):
                t0 = time.perf_counter()
                step()
                if i == args.every - 1:
                    prof.step_num = j * args.every + i + 1
                    t1 = time.perf_counter()
                    (tb if which == "tensorboard" else handler)(prof)
                    t2 = time.perf_counter()
                    fired[which].append(t2 - t0)
                    calls[which].append(t2 - t1)
                else:
                    other.append(time.perf_counter() - t0)
            if which == "traceanalyzer":
                for _ in range(args.every):
                    t0 = time.perf_counter()
                    step()
                    after.append(time.perf_counter() - t0)
        _idle(handler, len(fired["traceanalyzer"]))
        # phase 2: the worker's memory over --traces traces handed over back to back
        peaks = []
        base = len(handler.results)

        def sample(summary: dict) -> None:  # in the handler's thread, after each answer
            done = len(handler.results) - base
            if handler._proc is not None and (done == 1 or done % 10 == 0):
                peaks.append((done, _rss_kb(handler._proc.pid), _rss_kb(handler._proc.pid, "VmRSS")))

        handler.on_result = sample
        t_start = time.perf_counter()
        for k in range(args.traces):
            prof.step_num = 10**6 + k
            handler(prof)
        _idle(handler, base + args.traces)
        per_trace = (time.perf_counter() - t_start) / args.traces
        handler.close()
        ok = sum(r.get("status") == "ok" for r in handler.results)
    tb_f, ta_f = fired["tensorboard"], fired["traceanalyzer"]
    print(f"trace: {args.trace.name} ({args.trace.stat().st_size / 1e6:.2f} MB); {args.fires} fires per handler, every {args.every} steps")
    print(f"tensorboard_trace_handler    fired steps: {_stats(tb_f)}")
    print(f"traceanalyzer on_trace_ready fired steps: {_stats(ta_f)}")
    print(f"fired-step median ratio (traceanalyzer / tensorboard): {statistics.median(ta_f) / statistics.median(tb_f):.3f}")
    print(f"the handler call alone: tensorboard {_stats(calls['tensorboard'])}")
    print(f"                        traceanalyzer {_stats(calls['traceanalyzer'])}")
    print(f"steps without a fire:                      {_stats(other)}")
    print(f"steps right after our fire (worker busy):  {_stats(after)}")
    print(f"traces analysed ok: {ok}/{len(handler.results)}; back to back: {per_trace:.2f} s per trace")
    for n, hwm, rss in peaks:
        print(f"worker after {n:3d} traces: peak RSS {hwm / 1024:7.1f} MB, RSS now {rss / 1024:7.1f} MB")
    print(f"training process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB")


if __name__ == "__main__":
    main()
