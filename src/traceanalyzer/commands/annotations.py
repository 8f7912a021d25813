"""``traceanalyzer annotations``: GPU time under each NVTX / record_function range, by bucket."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import Engine, FrameFormat, config_opt, format_opt, stderr_console, table_command


class Source(str, Enum):
    auto = "auto"
    gpu = "gpu"
    host = "host"


class By(str, Enum):
    step = "step"
    rank = "rank"
    name = "name"


def _check(o: dict) -> None:
    from traceanalyzer.api.commandoptions import check_range_regex

    check_range_regex(o["name"])


def _view(o: dict):
    from traceanalyzer.api.commandline import annotation_view

    return annotation_view(o["paths"], name=o["name"], level=o["level"], source=Source(o["source"]).value, per=By(o["by"]).value,
                           config=o["config"], step_range=o["steps"], comm_kernels=o["comm_kernels"], workers=o["workers"],
                           engine=Engine(o["engine"]).value, address=o["address"], quiet=o["quiet"], console=stderr_console)


def _render(df, _an, fmt, o: dict):
    from traceanalyzer.render import frames

    if fmt.value == "json":
        return frames.json_bytes("annotations", {"rows": df}, source=Source(o["source"]).value, by=By(o["by"]).value)
    if fmt.value == "csv":
        return df.write_csv().encode()

    def table(console) -> None:
        if df.height == 0:
            console.print("no annotation range with GPU work" + (" matches" if o["name"] or o["level"] is not None else " in the trace"))
            return
        keep = [c for c in ("rank", "step", "steps", "ranks", "source", "name", "level", "count", "duration_ns", "compute_ns",
                            "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns", "mfu") if c in df.columns]
        labels = {"exposed_comm_ns": "exposed comm", "count": "n", "duration_ns": "GPU time"}
        frames.print_table(df.select(keep), f"GPU time under each range (by {By(o['by']).value}; the buckets sum to the GPU time)",
                           console, limit=o["top"], labels=labels)

    return table


annotations = table_command(
    "annotations", "GPU time under each NVTX / record_function range, split into compute / recompute / exposed comm / other / idle.",
    ["paths",
     ("name", Annotated[Optional[str], typer.Option("--name", metavar="REGEX", help="Only ranges whose name matches this regex (searched anywhere).")], None),
     ("level", Annotated[Optional[int], typer.Option("--level", metavar="N", min=0, help="Only ranges at this nesting level (0: outermost on their thread or stream).")], None),
     ("source", Annotated[Source, typer.Option("--source", help="gpu: Kineto's GPU-side range copies (gpu_user_annotation); host: host ranges "
                                               "(record_function, NVTX) projected onto the GPU through their launches; auto: gpu where a rank has them.")], Source.auto),
     ("by", Annotated[By, typer.Option("--by", help="step: a row per rank and step; rank: summed over steps; name: summed over ranks and steps.")], By.step),
     ("config", Annotated[Optional[Path], config_opt("Run configuration (TOML): adds model FLOPs and MFU per range; its [trace] section applies.")], None),
     ("format", Annotated[FrameFormat, format_opt()], FrameFormat.table),  # type: ignore[valid-type]
     "output",
     ("top", Annotated[int, typer.Option("--top", metavar="N", min=1, help="Rows shown in the table (json and csv have all).")], 40),
     "step_range", "whole_trace", "comm_kernel", "workers", "engine", "address", "quiet"],
    _view, _render, check=_check)


def register(app: typer.Typer) -> None:
    app.command()(annotations)
