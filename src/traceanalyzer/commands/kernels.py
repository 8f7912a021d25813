"""``traceanalyzer kernels`` and ``traceanalyzer ops``: the kernel and op tables."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import Engine, TableFormat, choices, format_opt, regex, table_command
from traceanalyzer.api.commandoptions import ELEMENT_BYTES, SORT_KEYS

Precision = choices("Precision", ELEMENT_BYTES)
Sort = choices("Sort", SORT_KEYS)
#: the options of both commands, in the order of their help, after their --sort
_BEFORE_SORT = ["paths",
    ("name", Annotated[Optional[str], typer.Option("--name", metavar="REGEX", callback=regex, help="Only names matching this regex (searched anywhere in the name).")], None),
    ("rank", Annotated[Optional[list[int]], typer.Option("--rank", metavar="RANK", help="Only this rank (repeatable).")], None),
    ("step", Annotated[Optional[list[int]], typer.Option("--step", metavar="STEP", help="Only this step number, N of ProfilerStep#N (repeatable).")], None)]
_AFTER_SORT = [
    ("top", Annotated[Optional[int], typer.Option("--top", metavar="N", min=1, help="Show the first N rows after sorting (table default: 20; other formats: all).")], None),
    ("precision", Annotated[Optional[Precision], typer.Option("--precision", help="Precision of kernels whose name states none (bf16, fp16, fp8, tf32, fp32): needed for bytes and the roofline.")], None),  # type: ignore[valid-type]
    ("format", Annotated[TableFormat, format_opt("csv and parquet: integer-ns columns as they are.")], TableFormat.table),  # type: ignore[valid-type]
    "output", "step_range", "whole_trace",
    ("recompute_range", Annotated[Optional[str], typer.Option("--recompute-range", metavar="REGEX", callback=regex, help="Regex of extra host/NVTX ranges whose contents are recompute.")], None),
    "comm_kernel", "config", "cache", "workers", "engine", "address", "quiet"]

DEFAULT_TOP = 20


def _check(o: dict) -> None:
    from traceanalyzer.api.commandoptions import check_table_filters

    o["sort"] = Sort(o["sort"]).value
    o["precision"] = None if o["precision"] is None else Precision(o["precision"]).value
    check_table_filters(o["name"], o["sort"], o["precision"], o["top"])
    if o["top"] is None and o["format"] == "table":
        o["top"] = DEFAULT_TOP


def _view(what: str):
    def view(o: dict):
        from traceanalyzer.api.commandline import table_view

        return table_view(what, o["paths"], name=o["name"], rank=o["rank"], step=o["step"], sort=o["sort"], top=o["top"],
                          precision=o["precision"], step_range=o["steps"], recompute_range=o["recompute_range"],
                          comm_kernels=o["comm_kernels"], cache=o["cache"], workers=o["workers"], engine=Engine(o["engine"]).value,
                          address=o["address"], quiet=o["quiet"])

    return view


def _render(what: str):
    def render(frame, an, fmt, o: dict):
        from traceanalyzer.render import kerneltable

        if fmt.value == "table":
            devices = sorted({str(d) for d in an.trace.meta.get_column("device_name").drop_nulls().to_list()})
            caption = ("device: " + ", ".join(devices) + "; " if devices else "") + (
                "share: of the selected rank-steps' GPU wall time; roofline: achieved / attainable at the kernel's arithmetic intensity")
            table = kerneltable.kernel_rich_table if what == "kernels" else kerneltable.op_rich_table
            title = f"{'Kernels' if what == 'kernels' else 'Host ops'} by {o['sort']} (top {o['top']})"
            return lambda console: console.print(table(frame, title, caption))
        if fmt.value == "json":
            context = {"sources": [str(s) for s in an.trace.sources], "filters": {"name": o["name"], "rank": o["rank"], "step": o["step"]},
                       "sort": o["sort"], "top": o["top"], "precision": o["precision"]}
            return kerneltable.json_document(frame, what, context)
        from traceanalyzer.render.frames import frame_bytes

        return frame_bytes(frame, fmt.value)

    return render


kernels = table_command(
    "kernels", "Every GPU kernel: calls, total/mean/p50/p99 time, its exact share of the breakdown, bucket, stream, achieved TFLOP/s.",
    [*_BEFORE_SORT, ("sort", Annotated[Sort, typer.Option("--sort", help="Sort key (total: summed duration; bucket: share of the breakdown).")], Sort.total), *_AFTER_SORT],  # type: ignore[valid-type]
    _view("kernels"), _render("kernels"), check=_check, width=200)

ops = table_command(
    "ops", "Every host op by name and input shapes: host time, GPU time of its kernels, FLOPs and achieved TFLOP/s (GEMM, attention).",
    [*_BEFORE_SORT, ("sort", Annotated[Sort, typer.Option("--sort", help="Sort key (gpu: GPU time of the kernels it launched; total: host time).")], Sort.gpu), *_AFTER_SORT],  # type: ignore[valid-type]
    _view("ops"), _render("ops"), check=_check, width=200)


def register(app: typer.Typer) -> None:
    app.command()(kernels)
    app.command()(ops)
