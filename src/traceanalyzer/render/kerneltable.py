"""Renderers of the kernel and op tables (``traceanalyzer kernels`` / ``ops``): a rich table with
readable units, or the frame as JSON / CSV / Parquet with exact integer nanoseconds. Formatting
only: every number comes from :mod:`traceanalyzer.classify.kernelstats` / ``opstats``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.render import units

if TYPE_CHECKING:
    from rich.table import Table

SCHEMA_VERSION = 1


def duration(ns: int | float | None) -> str:
    """One duration with its unit (:func:`traceanalyzer.render.units.duration`): ``30.9 µs``."""
    return units.duration(ns)


def _num(v: object, fmt: str) -> str:
    if v is None:
        return "-"
    text = format(v, fmt)
    return text[1:] if text.startswith("-") and float(text.rstrip("%")) == 0 else text


def _pct(v: object, fmt: str) -> str:
    return _num(v, fmt) + ("%" if v is not None else "")


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _time_columns(frame: pl.DataFrame, cols: dict[str, str]) -> dict[str, tuple[str, list[str]]]:
    """Per ``*_ns`` column: (heading with its unit, cells), one unit per column
    (:func:`traceanalyzer.render.units.column`)."""
    out = {}
    for c, head in cols.items():
        unit, cells = units.column(frame.get_column(c).to_list())
        out[c] = (f"{head} {unit}", cells)
    return out


def kernel_rich_table(frame: pl.DataFrame, title: str, caption: str | None = None) -> Table:
    """The kernel table for a terminal: names shortened so that distinct kernels stay distinct
    (:func:`traceanalyzer.render.names.shorten`), every time column in one unit."""
    from traceanalyzer.render.names import shorten

    from rich.table import Table  # rich only for the table format (JSON and CSV out need none)

    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    times = _time_columns(frame, {"total_ns": "total", "mean_ns": "mean", "p50_ns": "p50", "p99_ns": "p99", "bucket_ns": "bucket time"})
    heads = ["kernel", "bucket", "stream", "calls", *[h for h, _ in times.values()], "share", "TFLOP/s", "roofline"]
    for col in heads:
        t.add_column(col, justify="left" if col in ("kernel", "bucket") else "right", overflow="fold" if col == "kernel" else "ellipsis")
    names = shorten(frame.get_column("name").to_list(), 70)
    for i, r in enumerate(frame.iter_rows(named=True)):  # the displayed rows (--top)
        t.add_row(
            names[i], r["bucket"], r["streams"] or "-", str(r["calls"]), *[cells[i] for _, cells in times.values()],
            _pct(r["share_pct"], ".1f"), _num(r["tflops"], ".1f"), _pct(r["roofline_pct"], ".0f"),
        )
    return t


def op_rich_table(frame: pl.DataFrame, title: str, caption: str | None = None) -> Table:
    """The op table for a terminal: every time column in one unit."""
    from traceanalyzer.render.names import shorten

    from rich.table import Table  # rich only for the table format (JSON and CSV out need none)

    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    times = _time_columns(frame, {"total_ns": "host total", "mean_ns": "host mean", "p99_ns": "host p99"})
    gpu = _time_columns(frame, {"gpu_ns": "GPU time"})
    heads = ["op", "input shapes", "bucket", "calls", *[h for h, _ in times.values()], "kernels", *[h for h, _ in gpu.values()],
             "GPU share", "TFLOP/s", "GB/s", "roofline"]
    for col in heads:
        t.add_column(col, justify="left" if col in ("op", "input shapes", "bucket") else "right",
                     overflow="fold" if col in ("op", "input shapes") else "ellipsis")
    names = shorten(frame.get_column("name").to_list(), 50)
    for i, r in enumerate(frame.iter_rows(named=True)):  # the displayed rows (--top)
        t.add_row(
            names[i], _short(r["input_dims"] or "-", 50), r["bucket"] or "-", str(r["calls"]), *[cells[i] for _, cells in times.values()],
            str(r["kernels"]), *[cells[i] for _, cells in gpu.values()], _pct(r["gpu_share_pct"], ".1f"),
            _num(r["tflops"], ".1f"), _num(r["gbps"], ".0f"), _pct(r["roofline_pct"], ".0f"),
        )
    return t


def json_document(frame: pl.DataFrame, what: str, context: dict[str, Any]) -> bytes:
    """``{"schema": "traceanalyzer.<what>", "schema_version", "tool", **context, "rows": [...]}``."""
    doc = {"schema": f"traceanalyzer.{what}", "schema_version": SCHEMA_VERSION,
           "tool": {"name": "traceanalyzer", "version": __version__}, **context, "rows": frame.to_dicts()}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def kernel_diff_sections(diff: dict[str, Any], top: int = 15) -> list[Any]:
    """``compare``'s kernel diff as sections (:class:`traceanalyzer.render.predictions.Section`):
    the biggest contributions, and the per-bucket sums beside the bucket differences."""
    from traceanalyzer.render.predictions import Section, label, num

    s = Section(f"Kernels, B − A ({diff['unit']}): the {top} biggest changes",
                ["kernel", "bucket", "status", "calls A", "calls B", "A ms", "B ms", "B − A ms"])
    from traceanalyzer.render.names import shorten

    import itertools

    shown = list(itertools.takewhile(lambda r: r["status"] != "same", diff["rows"][:top]))
    cut = shorten([r["name"] for r in shown], 60)
    for i, r in enumerate(shown):
        s.rows.append([cut[i], r["bucket"], r["status"], num(r["calls_a"], 1), num(r["calls_b"], 1),
                       num(r["bucket_ms_a"], 3), num(r["bucket_ms_b"], 3), units.signed(r["contribution_ms"], 3)])
    c = diff["counts"]
    s.notes.append(f"{c['appeared']} appeared, {c['disappeared']} disappeared, {c['changed']} changed, {c['same']} unchanged. "
                   "Time: each kernel's exact share of its bucket, so the kernels of a bucket sum to that bucket's difference:")
    s.notes.append("; ".join(f"{label(b)} {units.signed(v, 3)} ms" for b, v in diff["by_bucket"].items() if v != 0) or "no bucket changed")
    return [s]
