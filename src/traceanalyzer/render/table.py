"""Terminal renderer: rich tables. Formatting only; every number comes from the Analysis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, JustifyMethod
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from traceanalyzer.buckets import BUCKET_LABELS as LABELS
from traceanalyzer.buckets import BUCKETS

if TYPE_CHECKING:
    import polars as pl

    from traceanalyzer.results import Analysis


def breakdown_table(analysis: Analysis) -> Table:
    meta = {r["rank"]: r for r in analysis.trace.meta.iter_rows(named=True)}
    devices = sorted({str(m.get("device_name")) for m in meta.values() if m.get("device_name")})
    totals = analysis.totals()
    counts = set(totals["steps"].to_list())
    one_count = len(counts) == 1  # the same number of steps on every rank: said in the title, not a column
    n_steps = next(iter(counts)) if one_count else None
    steps = f"mean of {n_steps} step{'s' * (n_steps != 1)}" if one_count else "mean per step"
    table = Table(
        title=f"GPU time per rank, {steps}: ms and % of the step",
        caption=("device: " + ", ".join(devices)) if devices else None,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("rank", justify="right")
    if not one_count:
        table.add_column("steps", justify="right")
    table.add_column("step ms", justify="right")
    for b in BUCKETS:
        table.add_column(LABELS[b], justify="right")
    table.add_column("overlapped comm", justify="right")
    for row in totals.iter_rows(named=True):
        n = row["steps"]
        dur = row["duration_us"]
        cells = [
            str(row["rank"]),
            *([] if one_count else [str(n)]),
            f"{dur / n / 1000:.3f}",
        ]
        for b in BUCKETS:
            v = row[f"{b}_us"]
            pct = 100 * v / dur if dur else 0.0
            cells.append(f"{v / n / 1000:.3f}\n{pct:.1f}%")
        ov = row["overlapped_comm_us"]
        cells.append(f"{ov / n / 1000:.3f}\n{100 * ov / dur if dur else 0.0:.1f}%")
        table.add_row(*cells)
    return table


def print_breakdown(analysis: Analysis, console: Console, summary: pl.DataFrame | None = None, findings: list[dict[str, Any]] | None = None,
                    integrity: list[dict[str, Any]] | None = None) -> None:
    """One row per rank, or with ``summary`` (``classify.rankspread.rank_spread``) the ranks' distribution;
    the failed trace-integrity checks (:func:`traceanalyzer.reconciliation.integrity.integrity`)
    first, then ``findings`` (:func:`traceanalyzer.reconciliation.findings.findings`)."""
    bad = [c for c in integrity or [] if c["ok"] is False]
    if bad:
        console.print(integrity_list(bad))
    if findings:
        console.print(findings_list(findings))
    elif findings is not None:
        console.print("Findings: no single loss of 1% of the step or more (the threshold is per cause: recompute, "
                      "exposed communication, each idle cause, copies, each on its own; how efficiently the kernels "
                      "compute: traceanalyzer reconcile)")
    console.print(breakdown_table(analysis) if summary is None else rank_summary_table(summary))


def integrity_list(failed: list[dict[str, Any]]) -> Group:
    """The failed trace-integrity checks: what failed, the counts behind it, the numbers to doubt."""
    lines: list[Any] = [Text(f"Trace integrity: {len(failed)} check{'s' if len(failed) != 1 else ''} failed: "
                             "doubt the numbers named below")]
    for c in failed:
        lines.append(Text(f"- {c['check']}: {c['detail']}"))
        lines.append(Padding(Text("unreliable: " + "; ".join(c["affects"])), (0, 0, 0, 2)))
    return Group(*lines)


def findings_list(findings: list[dict[str, Any]]) -> Group:
    """The largest losses, largest first, as a numbered list (it wraps at any width, where a
    table of six columns would be cut in two at 80): what and how much, why, what to change,
    the predicted gain."""
    lines: list[Any] = [Text("Findings: the largest losses per step, what causes them, what to change")]
    for i, f in enumerate(findings, 1):
        gain = ("- (" + f["gain_note"] + ")" if f.get("gain_note") else "-") if f["predicted_gain_ms"] is None \
            else f"{f['predicted_gain_ms']:.3f} ms per step"
        lines.append(Text(f"{i}. {f['label']}: {f['ms_per_step']:.3f} ms per step ({100 * f['share_of_step']:.1f}% of the step)"))
        for key, value in (("cause", f["cause"]), ("remedy", f["remedy"]), ("predicted gain", gain)):
            lines.append(Padding(Text(f"{key}: {value}"), (0, 0, 0, 3)))
    return Group(*lines)


# --- cause sub-tables (breakdown --detail) -------------------------------------------------

CAUSE_LABELS = {"idle_host_bound": "host-bound", "idle_sync": "sync wait", "idle_bubble": "PP bubble", "idle_other": "other"}
#: host-bound idle by what the launching host thread was doing (traceanalyzer.buckets.HOST_CAUSES)
HOST_LABELS = {"idle_host_dataloader": "data loader", "idle_host_optimizer": "optimizer", "idle_host_ops": "ops",
               "idle_host_untraced": "untraced"}


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def idle_table(analysis: Analysis) -> Table:
    """Idle by cause as a tree, per rank: idle, its causes indented under it and the host-bound
    split under host-bound, each with its mean per step and its share of its parent (the
    children of a row sum to 100 % of it)."""
    from traceanalyzer.render import units

    t = Table(title="Idle by cause, mean per step: each cause as a share of its parent", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("rank", "right"), ("cause", "left"), ("ms per step", "right"), ("share", "right"), ("of", "left"))
    for col, just in columns:
        t.add_column(col, justify=just)
    host = [f for f in HOST_LABELS if f"{f}_ns" in analysis.steps.columns]

    def share(v: float, parent: float) -> str:
        return f"{units.fixed(100 * v / parent if parent else 0.0, 0)}%"

    for i, row in enumerate(analysis.totals().iter_rows(named=True)):
        n, idle, step = row["steps"], row["idle_ns"], row["duration_ns"]
        if i:
            t.add_section()
        t.add_row(str(row["rank"]), "idle", units.fixed(idle / n / 1e6, 3), share(idle, step), "step")
        for f, label in CAUSE_LABELS.items():
            v = row.get(f"{f}_ns", 0) or 0
            t.add_row("", f"  {label}", units.fixed(v / n / 1e6, 3), share(v, idle), "idle")
            if f == "idle_host_bound":
                for h in host:
                    hv = row.get(f"{h}_ns", 0) or 0
                    t.add_row("", f"    {HOST_LABELS[h]}", units.fixed(hv / n / 1e6, 3), share(hv, v), "host-bound")
    if host:
        t.caption = ("host-bound split by what the launching host thread was doing: in a DataLoader __next__ range, "
                     "an Optimizer.step/zero_grad range, another recorded op (dispatch, launch), or none (untraced)")
        t.caption_justify = "left"
    return t


def comm_table(analysis: Analysis, world_only: set[str] | frozenset[str] = frozenset()) -> Table | None:
    """Communication per rank; ``world_only``: the dimensions (lower case) given only because the
    group spans the world (shown as "world: dimension unknown")."""
    import polars as pl

    if analysis.comm is None or analysis.comm.height == 0:
        return None
    t = Table(
        title="Communication per rank, summed over steps (ms). wait/transfer: * = estimated from bytes and bus bandwidth, - = unknown",
        title_justify="left",
    )
    for col in ("rank", "by", "key", "count", "MB", "kernel", "exposed", "overlapped", "wait", "transfer"):
        t.add_column(col, justify="left" if col in ("by", "key") else "right")
    agg = (
        analysis.comm.group_by("rank", "by", "key")
        .agg(
            pl.col("count").sum(),
            pl.col("bytes").sum(),
            pl.col("bytes").is_not_null().any().alias("has_bytes"),
            *[pl.col(f"{x}_ns").sum() for x in ("time", "exposed", "overlapped")],
            *[pl.when(pl.col(f"{x}_ns").is_not_null().any()).then(pl.col(f"{x}_ns").sum()).alias(f"{x}_ns") for x in ("wait", "transfer")],
            pl.col("transfer_estimated").any(),
            pl.col("dim").drop_nulls().first(),
        )
        .sort("rank", "by", "exposed_ns", descending=[False, False, True])
    )
    for r in agg.iter_rows(named=True):
        star = "*" if r["transfer_estimated"] else ""
        dim = "world: dimension unknown" if r["dim"] and r["dim"].lower() in world_only else r["dim"]
        key = (dim if r["by"] == "dim" else r["key"]) if r["by"] != "group" or not dim else f"{r['key']} ({dim})"
        t.add_row(
            str(r["rank"]), r["by"], key, str(r["count"] or 0),
            f"{r['bytes'] / 1e6:.2f}" if r["has_bytes"] else "-",
            _ms(r["time_ns"]), _ms(r["exposed_ns"]), _ms(r["overlapped_ns"]),
            _ms(r["wait_ns"]) + star, _ms(r["transfer_ns"]) + star,
        )
    return t


def recompute_table(analysis: Analysis, top: int = 8) -> Table | None:
    import polars as pl

    ops = analysis.recomputed_by_name
    if ops is None or ops.height == 0:
        return None
    t = Table(title=f"Recomputed ops (activation checkpointing), top {top} per rank by GPU time", title_justify="left")
    for col in ("rank", "op", "count", "GPU ms"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for r in ops.group_by("rank", maintain_order=True).head(top).iter_rows(named=True):
        t.add_row(str(r["rank"]), r["name"], str(r["count"]), _ms(r["gpu_ns"]))
    del pl
    return t


def cross_rank_table(analysis: Analysis) -> Table | None:
    cr = analysis.cross_rank
    if cr is None or cr.height == 0:
        return None
    t = Table(title="Across ranks, per step (ms)", title_justify="left")
    for col in ("step", "ranks", "slowest", "max", "median", "skew", "straggler bucket", "excess", "waited on"):
        t.add_column(col, justify="left" if col == "straggler bucket" else "right")
    for r in cr.iter_rows(named=True):
        t.add_row(
            str(r["step"]), str(r["ranks"]), str(r["slowest_rank"]), _ms(r["max_ns"]), _ms(r["median_ns"]),
            _ms(r["skew_ns"]), str(r["straggler_bucket"]), _ms(r["straggler_excess_ns"]),
            "-" if r.get("waited_on_rank") is None else f"rank {r['waited_on_rank']}",
        )
    return t


def verdict_table(rows: list[dict[str, Any]] | None) -> Table | None:
    """The host/launch verdict per rank: ``rows`` are the report model's ``host_verdict``
    (:func:`traceanalyzer.views.document.host_verdict`); none when the launches table was not computed."""
    if not rows:
        return None
    t = Table(title="Host and launches per rank: is the step CPU-bound? (GPU waits on the host >= 10% of the step and "
                    "host time per launched item > GPU time per item)", title_justify="left")
    for col in ("rank", "CPU-bound", "steps CPU-bound", "GPU waits %", "host µs/item", "GPU µs/item", "CUDA graphs"):
        t.add_column(col, justify="right")

    def us(x: float | None) -> str:
        return "-" if x is None else f"{x / 1000:.1f}"

    for r in rows:
        # without the profiler where the trace gives an estimate (the verdict is the rule on those)
        wait = r["gpu_wait_share"] if r.get("gpu_wait_share_unprofiled") is None else r["gpu_wait_share_unprofiled"]
        host = r["host_ns_per_kernel"] if r.get("gpu_wait_share_unprofiled") is None else r.get("host_ns_per_kernel_unprofiled")
        t.add_row(str(r["rank"]), "yes" if r["cpu_bound"] else "no", f"{r['cpu_bound_steps']} of {r['steps']}",
                  f"{100 * wait:.1f}%", us(host), us(r["gpu_ns_per_kernel"]),
                  "yes" if r["cuda_graphs"] else "no")
    if any(r.get("gpu_wait_share_unprofiled") is not None for r in rows):
        t.caption = ("without the profiler's own host work (the unprofiled estimate); as recorded: "
                     + ", ".join(f"rank {r['rank']} {'CPU-bound' if r.get('cpu_bound_profiled') else 'not CPU-bound'}, "
                                 f"GPU waits {100 * r['gpu_wait_share']:.1f}%, host {us(r['host_ns_per_kernel'])} µs/item" for r in rows[:4]))
        t.caption_justify = "left"
    return t


def print_detail(analysis: Analysis, console: Console, summary: pl.DataFrame | None = None, stragglers: pl.DataFrame | None = None,
                 comm_summary: pl.DataFrame | None = None,
                 host_verdict: list[dict[str, Any]] | None = None, world_only: set[str] | frozenset[str] = frozenset()) -> None:
    """The cause sub-tables: idle by cause, host and launches, communication, recompute,
    cross-rank; with ``summary`` (the ranks' distribution, which holds the idle causes) no
    per-rank idle table, and ``comm_summary`` (``classify.rankspread.comm_spread``) instead of
    one row per rank; ``stragglers``: the multi-step straggler table's rows; ``host_verdict``:
    the per-rank host/launch verdict (:func:`traceanalyzer.views.document.host_verdict`)."""
    comm = comm_summary_table(comm_summary) if summary is not None else comm_table(analysis, world_only)
    tables = (None if summary is not None else idle_table(analysis), verdict_table(host_verdict), comm, recompute_table(analysis),
              cross_rank_table(analysis), None if stragglers is None else stragglers_table(stragglers))
    for table in tables:
        if table is not None:
            console.print(table)


# --- many ranks (breakdown --ranks) ----------------------------------------------------------

#: a field named in a sentence or a cell of its own (the stragglers' bucket)
FIELD_LABELS = {"duration": "step time", **LABELS, **{f: f"idle: {v}" for f, v in CAUSE_LABELS.items()},
                **{f: f"idle: host-bound: {v}" for f, v in HOST_LABELS.items()}}
#: idle's causes indented under idle, host-bound's split under host-bound: a tree, as the idle table
SPREAD_LABELS = {"duration": "step time", **LABELS, **{f: f"  {v}" for f, v in CAUSE_LABELS.items()},
                 **{f: f"    {v}" for f, v in HOST_LABELS.items()}}


def rank_summary_table(summary: pl.DataFrame) -> Table:
    """The ranks' distribution per field (``classify.rankspread.rank_spread``), ms per step."""
    n = summary.item(0, "ranks") if summary.height else 0
    t = Table(title=f"GPU time over {n} ranks, mean per step (ms): distribution, slowest ranks", title_justify="left",
              caption="every rank: --ranks all", caption_justify="left")
    for col in ("", "min", "p50", "mean", "max", "slowest", "top ranks (ms)"):
        t.add_column(col, justify="left" if col in ("", "top ranks (ms)") else "right")
    for r in summary.iter_rows(named=True):  # one row per field
        top = ", ".join(f"{k} ({_ms(v)})" for k, v in zip(r["top_ranks"], r["top_ns"]))
        t.add_row(SPREAD_LABELS.get(r["field"], r["field"]), *[_ms(r[f"{k}_ns"]) for k in ("min", "p50", "mean", "max")],
                  str(r["max_rank"]), top)
    return t


def stragglers_table(per_rank: pl.DataFrame, top: int = 10) -> Table | None:
    """Ranks slow on the most steps (``classify.stragglers.stragglers``), at most ``top``."""
    slow = per_rank.filter(per_rank["slow_steps"] > 0)
    if slow.height == 0:
        return None
    t = Table(title="Stragglers: ranks over the step's median by > 5%, on how many steps, and why (ms)", title_justify="left")
    for col in ("rank", "slow steps", "slowest on", "excess", "max excess", "slow in", "on steps", "bucket excess"):
        t.add_column(col, justify="left" if col == "slow in" else "right")
    for r in slow.head(top).iter_rows(named=True):
        t.add_row(str(r["rank"]), f"{r['slow_steps']} of {r['steps']}", str(r["slowest_steps"]), _ms(r["excess_ns"]),
                  _ms(r["max_excess_ns"]), FIELD_LABELS.get(r["bucket"], str(r["bucket"])), str(r["bucket_steps"]),
                  _ms(r["bucket_excess_ns"]))
    if slow.height > top:
        t.caption = f"{slow.height - top} more slow ranks: traceanalyzer.stragglers() in Python"
        t.caption_justify = "left"
    return t


def comm_summary_table(spread: pl.DataFrame | None) -> Table | None:
    """Communication over the ranks (``classify.rankspread.comm_spread``), ms summed over steps."""
    if spread is None or spread.height == 0:
        return None
    t = Table(title="Communication over the ranks, per rank summed over steps (ms): distribution, the rank with the most exposed",
              title_justify="left", caption="every rank: --ranks all", caption_justify="left")
    for col in ("by", "key", "ranks", "count", "exposed min", "p50", "max", "max rank", "wait p50", "wait max", "transfer p50"):
        t.add_column(col, justify="left" if col in ("by", "key") else "right")
    for r in spread.iter_rows(named=True):  # one row per type, group, dimension
        t.add_row(r["by"], r["key"], str(r["ranks"]), str(r["count"]), _ms(r["exposed_min_ns"]), _ms(r["exposed_p50_ns"]),
                  _ms(r["exposed_max_ns"]), str(r["exposed_max_rank"]), _ms(r["wait_p50_ns"]), _ms(r["wait_max_ns"]),
                  _ms(r["transfer_p50_ns"]))
    return t
