"""``traceanalyzer launches``: kernel launch latency, kernels per step, launch-bound steps and
the launch queue per stream."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from traceanalyzer.commands.common import Engine, FrameFormat, format_opt, share, stderr_console, table_command


class View(str, Enum):
    steps = "steps"
    queue = "queue"
    kernels = "kernels"
    queue_series = "queue-series"

#: the table's columns (json and csv have every column)
_TABLE_COLUMNS = {
    "steps": ["rank", "step", "kernels", "launched", "launch_latency_p50_ns", "launch_latency_p99_ns", "launch_delay_p50_ns",
              "launch_cpu_p50_ns", "gpu_work_p50_ns", "duration_ns", "idle_host_bound_ns", "host_bound_share", "launch_bound",
              "host_ns_per_kernel", "gpu_ns_per_kernel", "cuda_graphs", "cpu_bound"],
    "queue": ["rank", "pid", "stream", "launched", "span_ns", "queued_mean", "queued_max", "outstanding_mean", "outstanding_max"],
    "kernels": ["rank", "step", "stream", "name", "launch_name", "launch_latency_ns", "launch_delay_ns", "cpu_ns", "gpu_ns"],
}
_LABELS = {
    "host_per_item_unprofiled_ns": "host per item",
    "launch_latency_p50_ns": "latency p50", "launch_latency_p99_ns": "latency p99", "launch_delay_p50_ns": "delay p50",
    "launch_cpu_p50_ns": "launch call p50", "gpu_work_p50_ns": "item p50", "idle_host_bound_ns": "GPU waits host",
    "host_bound_share": "waits %", "launch_bound": "launch-bound", "launch_latency_ns": "latency", "launch_delay_ns": "delay",
    "cpu_ns": "launch call", "gpu_ns": "GPU", "queued_mean": "queued mean", "queued_max": "queued max",
    "outstanding_mean": "outstanding mean", "outstanding_max": "outstanding max", "duration_ns": "step",
    "host_per_item_ns": "host per item", "gpu_per_item_ns": "GPU per item", "cuda_graphs": "CUDA graphs", "cpu_bound": "CPU-bound",
}


def _view(o: dict):
    from traceanalyzer.api.commandline import launch_view

    view = View(o["view"])
    return launch_view(o["paths"], view.name, o["threshold"], queue=o["format"] != "csv", step_range=o["steps"],
                       comm_kernels=o["comm_kernels"], workers=o["workers"], engine=Engine(o["engine"]).value, address=o["address"],
                       quiet=o["quiet"], console=stderr_console)


def _render(result, _an, fmt, o: dict):
    from traceanalyzer.render import frames

    shown, notes = result
    view, threshold = View(o["view"]), o["threshold"]
    if fmt.value == "json":
        return frames.json_bytes("launches", shown, view=view.value, launch_bound_threshold=threshold,
                                 **({"profiler": notes} if view is View.steps else {}))
    if fmt.value == "csv":
        return next(iter(shown.values())).write_csv().encode()
    titles = {
        "steps": f"Launches per rank and step (launch-bound: GPU waiting on launches >= {100 * threshold:g}% of the step "
                 "and median item <= median launch call; CPU-bound: GPU waiting >= "
                 f"{100 * threshold:g}% and host time per launched item (dispatch + launch) > GPU time per item; both without the "
                 "profiler's own host work where the trace gives an estimate, the verdict as recorded in the JSON: cpu_bound_profiled)",
        "queue": "Launch queue per stream (queued: launched, not started; outstanding: not finished; means weighted by time)",
        "kernels": "Launched GPU items (latency: launch call start -> GPU start)",
        "queue_series": "Queue length over time (each value holds until the next row)",
    }

    def table(console) -> None:
        for key, df in shown.items():
            if key in _TABLE_COLUMNS:
                # per-item times end in _ns_per_kernel in the JSON; shown in ms like the rest
                cols = list(_TABLE_COLUMNS[key])
                if key == "steps" and "host_ns_per_kernel_unprofiled" in df.columns:
                    # the verdict is the rule on the step without the profiler: its host time per item shown
                    # (the verdict as recorded is in the JSON and CSV: cpu_bound_profiled)
                    cols[cols.index("host_ns_per_kernel")] = "host_ns_per_kernel_unprofiled"
                df = df.select(cols).rename(
                    {c: "host_per_item_unprofiled_ns" if c == "host_ns_per_kernel_unprofiled" else c.replace("_ns_per_kernel", "_per_item_ns")
                     for c in cols if "_ns_per_kernel" in c})
            frames.print_table(df, titles[key], console, limit=o["top"], labels=_LABELS)
        for n in notes:
            if n["note"]:
                console.print(f"note: {n['note']}")

    return table


launches = table_command(
    "launches", "Kernel launch latency (launch call -> GPU start), kernels per step, launch-bound steps, queue length per stream.",
    ["paths",
     ("view", Annotated[View, typer.Option("--view", help="steps: launch statistics per rank and step (table: with the queue summary); queue: "
                                           "queue length per stream; kernels: one row per launched GPU item; queue-series: queue length over time.")], View.steps),
     ("threshold", Annotated[float, typer.Option("--threshold", metavar="FRACTION", callback=share, help="Share of a step (0-1) the GPU must wait on launch calls not yet made "
                                                 "for the step to be launch-bound.")], 0.10),
     ("format", Annotated[FrameFormat, format_opt()], FrameFormat.table),  # type: ignore[valid-type]
     "output",
     ("top", Annotated[int, typer.Option("--top", metavar="N", min=1, help="Rows shown in the table (json and csv have all).")], 40),
     "step_range", "whole_trace", "comm_kernel", "config", "workers", "engine", "address", "quiet"],
    _view, _render)


def register(app: typer.Typer) -> None:
    app.command()(launches)
