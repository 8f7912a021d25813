"""Critical path renderers: a rich table, a JSON document, CSV. Formatting only: every number
comes from :func:`traceanalyzer.classify.critical_path.critical_path`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceanalyzer._version import __version__
from traceanalyzer.buckets import BUCKET_LABELS, CP_BUCKETS

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod
    from rich.table import Table

    from traceanalyzer.results import CriticalPath

SCHEMA = "traceanalyzer.critical_path"  # traceanalyzer/schemas/critical_path.schema.json
SCHEMA_VERSION = 1
LABELS = {**BUCKET_LABELS, "host": "host"}


def summary_table(cp: CriticalPath) -> Table:
    from rich.table import Table  # rich only for the table format (JSON and CSV out need none)

    table = Table(title="Critical path per step: length (ms) and share of each bucket on it", title_justify="left",
                  caption=("host: the host's ops and the time between them (Python, sleeps, data loading): a host stall is on the "
                           "path as the host's; --no-host-gaps: ops only, as HTA" if cp.host_gaps else
                           "host: ops and runtime calls only (--no-host-gaps, as HTA): host time outside every op is on no "
                           "bucket, so the path can be shorter than the step"),
                  caption_justify="left")
    for col in ("step", "rank", "ranks", "path ms", "window ms"):
        table.add_column(col, justify="right")
    for b in CP_BUCKETS:
        table.add_column(LABELS[b], justify="right")
    table.add_column("hops", justify="right")
    for r in cp.summary.iter_rows(named=True):  # one row per step
        cells = [
            str(r["step"]), "all" if r["rank"] is None else str(r["rank"]), str(r["ranks"]),
            f"{r['path_ns'] / 1e6:.3f}", f"{r['window_ns'] / 1e6:.3f}" if r["window_ns"] is not None else "",
        ]
        cells += [f"{100 * r[f'{b}_share']:.1f}%" for b in CP_BUCKETS]
        cells.append(f"{r['syncs']} sync / {r['waits']} wait / {r['collectives']} coll")
        table.add_row(*cells)
    return table


def segments_table(cp: CriticalPath, top: int) -> Table:
    from rich.table import Table

    table = Table(title=f"Longest pieces of the path (top {top})", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("step", "right"), ("rank", "right"), ("ms", "right"), ("what", "left"),
                                                      ("bucket", "left"), ("where", "left"), ("name", "left"))
    for col, just in columns:
        table.add_column(col, justify=just, overflow="fold" if col == "name" else "ellipsis")
    rows = cp.segments.sort(["dur_ns", "step", "seq"], descending=[True, False, False]).head(top)
    for r in rows.iter_rows(named=True):  # top rows only
        table.add_row(str(r["step"]), str(r["rank"]), f"{r['dur_ns'] / 1e6:.3f}", r["what"], LABELS.get(r["bucket"], r["bucket"] or ""),
                      r["where"] or "", (r["name"] or "")[:160])
    return table


def print_critical_path(cp: CriticalPath, console: Console, top: int = 10) -> None:
    console.print(summary_table(cp))
    if top > 0 and cp.segments.height:
        console.print(segments_table(cp, top))


def json_bytes(cp: CriticalPath) -> bytes:
    """``{"schema", "schema_version", "version", "summary": [...], "segments": [...]}``; rows as objects
    (schema ``traceanalyzer.critical_path``)."""
    head = (f'{{"schema":"{SCHEMA}","schema_version":{SCHEMA_VERSION},"version":"{__version__}",'
            f'"host_gaps":{"true" if cp.host_gaps else "false"},"summary":')
    return (head + cp.summary.write_json() + ',"segments":' + cp.segments.write_json() + "}\n").encode()


def csv_bytes(cp: CriticalPath) -> bytes:
    """The path's segments, one row each (the summary is their sum per step)."""
    return cp.segments.write_csv().encode()


__all__ = ["print_critical_path", "json_bytes", "csv_bytes", "summary_table", "segments_table"]
