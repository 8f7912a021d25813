"""Renderers of the kernel and op tables (``traceanalyzer kernels`` / ``ops``): a rich table with
readable units, or the frame as JSON / CSV / Parquet with exact integer nanoseconds. Formatting
only: every number comes from :mod:`traceanalyzer.classify.kernelstats` / ``opstats``."""

from __future__ import annotations

import orjson
import polars as pl
from rich.table import Table

from traceanalyzer._version import __version__

SCHEMA_VERSION = 1


def duration(ns: int | float | None) -> str:
    """A duration in the unit that suits it: ``812 ns``, ``4.58 us``, ``12.3 ms``, ``1.20 s``."""
    if ns is None:
        return "-"
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            x = v / scale
            return f"{x:.3g} {unit}" if abs(x) < 100 else f"{x:.0f} {unit}"
    return f"{v:.0f} ns"


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def kernel_rich_table(frame: pl.DataFrame, title: str, caption: str | None = None) -> Table:
    """The kernel table for a terminal."""
    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for col, just in (("kernel", "left"), ("bucket", "left"), ("stream", "right"), ("calls", "right"), ("total", "right"),
                      ("mean", "right"), ("p50", "right"), ("p99", "right"), ("bucket time", "right"), ("share", "right"),
                      ("TFLOP/s", "right"), ("roofline", "right")):
        t.add_column(col, justify=just, overflow="fold" if col == "kernel" else "ellipsis")
    for r in frame.iter_rows(named=True):  # the displayed rows (--top)
        t.add_row(
            _short(r["name"]), r["bucket"], r["streams"] or "-", str(r["calls"]), duration(r["total_ns"]), duration(r["mean_ns"]),
            duration(r["p50_ns"]), duration(r["p99_ns"]), duration(r["bucket_ns"]), _num(r["share_pct"], ".1f") + ("%" if r["share_pct"] is not None else ""),
            _num(r["tflops"], ".1f"), _num(r["roofline_pct"], ".0f") + ("%" if r["roofline_pct"] is not None else ""),
        )
    return t


def op_rich_table(frame: pl.DataFrame, title: str, caption: str | None = None) -> Table:
    """The op table for a terminal."""
    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for col, just in (("op", "left"), ("input shapes", "left"), ("bucket", "left"), ("calls", "right"), ("host total", "right"),
                      ("host mean", "right"), ("host p99", "right"), ("kernels", "right"), ("GPU time", "right"), ("GPU share", "right"),
                      ("TFLOP/s", "right"), ("GB/s", "right"), ("roofline", "right")):
        t.add_column(col, justify=just, overflow="fold" if col in ("op", "input shapes") else "ellipsis")
    for r in frame.iter_rows(named=True):  # the displayed rows (--top)
        t.add_row(
            _short(r["name"], 50), _short(r["input_dims"] or "-", 50), r["bucket"] or "-", str(r["calls"]), duration(r["total_ns"]),
            duration(r["mean_ns"]), duration(r["p99_ns"]), str(r["kernels"]), duration(r["gpu_ns"]),
            _num(r["gpu_share_pct"], ".1f") + ("%" if r["gpu_share_pct"] is not None else ""),
            _num(r["tflops"], ".1f"), _num(r["gbps"], ".0f"), _num(r["roofline_pct"], ".0f") + ("%" if r["roofline_pct"] is not None else ""),
        )
    return t


def json_document(frame: pl.DataFrame, what: str, context: dict) -> bytes:
    """``{"schema": "traceanalyzer.<what>", "schema_version", "tool", **context, "rows": [...]}``."""
    doc = {"schema": f"traceanalyzer.{what}", "schema_version": SCHEMA_VERSION,
           "tool": {"name": "traceanalyzer", "version": __version__}, **context, "rows": frame.to_dicts()}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def kernel_diff_sections(diff: dict, top: int = 15) -> list:
    """``compare``'s kernel diff as sections (:class:`traceanalyzer.render.predictions.Section`):
    the biggest contributions, and the per-bucket sums beside the bucket differences."""
    from traceanalyzer.render.predictions import Section, label, num

    s = Section(f"Kernels, B − A ({diff['unit']}): the {top} biggest changes",
                ["kernel", "bucket", "status", "calls A", "calls B", "A ms", "B ms", "B − A ms"])
    for r in diff["rows"][:top]:
        if r["status"] == "same":
            break
        s.rows.append([_short(r["name"], 60), r["bucket"], r["status"], num(r["calls_a"], 1), num(r["calls_b"], 1),
                       num(r["bucket_ms_a"], 3), num(r["bucket_ms_b"], 3), f"{r['contribution_ms']:+,.3f}"])
    c = diff["counts"]
    s.notes.append(f"{c['appeared']} appeared, {c['disappeared']} disappeared, {c['changed']} changed, {c['same']} unchanged. "
                   "Time: each kernel's exact share of its bucket, so the kernels of a bucket sum to that bucket's difference:")
    s.notes.append("; ".join(f"{label(b)} {v:+,.3f} ms" for b, v in diff["by_bucket"].items() if v != 0) or "no bucket changed")
    return [s]
