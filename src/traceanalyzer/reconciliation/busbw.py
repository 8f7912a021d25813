"""Collective efficiency: the bus bandwidth each collective in a trace reached, against a reference.

Public surface: :func:`achieved_busbw` (one row per collective kernel with a byte count),
:func:`busbw_summary` (per collective type and process group) and :func:`exposed_split` (the
exposed communication split into wait, link speed and below the reference).

For each communication kernel of :func:`traceanalyzer.classify.comm.collectives` that has a
byte count and a group size:

* ``time_ns``: the **transfer** time when the group's ranks are aligned in the loaded traces
  (end − last rank's arrival: the wait for late peers is not the link's fault), else the whole
  kernel duration (``time_basis`` says which; with one rank loaded the wait for peers is
  inside, so the bandwidth is a lower bound);
* ``algbw_gbps = bytes / time`` (bytes = nccl-tests' "size", the whole buffer), ``busbw_gbps =
  algbw × factor`` with nccl-tests' factors (:func:`traceanalyzer.baselines.bus_factor`:
  all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n; broadcast, reduce,
  send/recv 1);
* ``reference_gbps``: the cluster's own nccl-tests baseline at the same message size
  (interpolated in log2 size, :func:`traceanalyzer.baselines.busbw_at`) when one is given; else
  the hardware table's effective NVLink bus bandwidth (line rate × ``BUS_EFFICIENCY``), said
  as such in ``reference``; ``efficiency = busbw / reference``.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.baselines.curve import busbw_at
from traceanalyzer.baselines.nccltests import bus_factor_expr
from traceanalyzer.hardware import BUS_EFFICIENCY, GPUS, detect_gpu

BUSBW_COLUMNS = [
    "rank", "step", "coll_type", "pg_name", "group_size", "bytes", "start_ns", "dur_ns", "time_ns", "time_basis",
    "algbw_gbps", "bus_factor", "busbw_gbps", "reference_gbps", "reference", "extrapolated", "efficiency",
]


def achieved_busbw(coll: pl.DataFrame, baseline: pl.DataFrame | None = None, gpu: str | None = None) -> pl.DataFrame:
    """Achieved bus bandwidth per collective kernel (see the module doc). ``gpu``: a device name
    for the hardware-table reference when no ``baseline`` is given."""
    c = coll.filter(
        pl.col("bytes").is_not_null() & (pl.col("bytes") > 0) & pl.col("group_size").is_not_null() & (pl.col("dur_ns") > 0)
    )
    aligned = ~pl.col("transfer_estimated") & pl.col("transfer_ns").is_not_null() & (pl.col("transfer_ns") > 0)
    c = c.with_columns(
        pl.when(aligned).then(pl.col("transfer_ns")).otherwise(pl.col("dur_ns")).alias("time_ns"),
        pl.when(aligned).then(pl.lit("transfer (ranks aligned)")).otherwise(pl.lit("kernel duration (includes wait)")).alias("time_basis"),
        bus_factor_expr(pl.col("coll_type"), pl.col("group_size")).alias("bus_factor"),
    ).filter(pl.col("bus_factor").is_not_null())
    c = c.with_columns((pl.col("bytes") / pl.col("time_ns")).alias("algbw_gbps")).with_columns(
        (pl.col("algbw_gbps") * pl.col("bus_factor")).alias("busbw_gbps")
    ).with_row_index("__i")
    if baseline is not None:
        refs = []
        for ctype, n in c.select("coll_type", "group_size").unique().iter_rows():  # a few (type, group size) pairs
            part = c.filter((pl.col("coll_type") == ctype) & (pl.col("group_size") == n))
            at = busbw_at(baseline, ctype, part["bytes"], nranks=n)
            what = pl.when(pl.col("baseline_gbps").is_null()).then(pl.lit(f"no {ctype} in the baseline"))
            what = what.otherwise(pl.format("nccl-tests baseline, {} ranks {}, interpolated at this size",
                                            pl.col("baseline_nranks").cast(pl.String).fill_null("?"), pl.col("baseline_scope")))
            refs.append(pl.concat([part.select("__i"), at.select(pl.col("baseline_gbps").alias("reference_gbps"), what.alias("reference"), "extrapolated")], how="horizontal"))
        ref = pl.concat(refs) if refs else pl.DataFrame(schema={"__i": pl.UInt32, "reference_gbps": pl.Float64, "reference": pl.String, "extrapolated": pl.Boolean})
        c = c.join(ref, on="__i", how="left")
    else:
        spec = GPUS.get(detect_gpu(gpu) or "")
        if spec is None:
            c = c.with_columns(pl.lit(None, pl.Float64).alias("reference_gbps"),
                               pl.lit(f"no baseline, and no hardware figure for {gpu or 'an unknown GPU'}").alias("reference"))
        else:
            c = c.with_columns(
                pl.lit(spec.nvlink_gbps * BUS_EFFICIENCY).alias("reference_gbps"),
                pl.lit(f"hardware table (no baseline given): {spec.name} NVLink {spec.nvlink_gbps:g} GB/s × {BUS_EFFICIENCY}").alias("reference"),
            )
        c = c.with_columns(pl.lit(False).alias("extrapolated"))
    return (
        c.with_columns((pl.col("busbw_gbps") / pl.col("reference_gbps")).alias("efficiency")).sort("rank", "start_ns", "__i").select(BUSBW_COLUMNS)
        .with_columns(pl.col("coll_type", "pg_name").cast(pl.String))  # categorical in the collectives table
    )


def busbw_summary(per: pl.DataFrame) -> pl.DataFrame:
    """Per collective type and process group: count, bytes, time, bus bandwidth over the
    instances (time-weighted: total bus bytes / total time), median efficiency."""
    return (
        per.group_by("coll_type", "pg_name", "group_size")
        .agg(
            pl.len().alias("count"),
            pl.col("bytes").sum().alias("bytes"),
            pl.col("time_ns").sum().alias("time_ns"),
            ((pl.col("bytes") * pl.col("bus_factor")).sum() / pl.col("time_ns").sum()).alias("busbw_gbps"),
            pl.col("reference_gbps").median().alias("reference_gbps_median"),
            pl.col("efficiency").median().alias("efficiency_median"),
            pl.col("reference").first(),
            pl.col("time_basis").first(),
        )
        .sort("time_ns", descending=True)
    )


def exposed_split(per: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """The exposed communication of each (rank, step, collective type) split by cause.

    ``per``: :func:`achieved_busbw`; ``comm``: ``Analysis.comm`` (its ``by == "type"`` rows give
    ``exposed_ns``). Each kernel's duration is cut into ``wait`` (for late peers: duration −
    transfer when the group's ranks are aligned; else 0, the wait then stays inside the slower
    part), ``link speed`` = min(bytes × factor / reference, time): what the transfer needs at the
    reference bus bandwidth, and ``below reference`` = the rest of the time (below the cluster's
    own baseline, or the table figure without one). The exposed time of the (rank, step, type)
    is split in the proportions of those parts summed over its kernels with a reference; the
    three integer-ns columns sum exactly to ``exposed_ns``. ``split_basis`` says whether the
    wait was measured.
    """
    k = (
        per.filter(pl.col("reference_gbps").is_not_null() & (pl.col("reference_gbps") > 0))
        .with_columns((pl.col("bytes") * pl.col("bus_factor") / pl.col("reference_gbps")).alias("__tref"))
        .with_columns(pl.min_horizontal("__tref", pl.col("time_ns").cast(pl.Float64)).alias("__at"))
    )
    parts = k.group_by("rank", "step", "coll_type").agg(
        (pl.col("dur_ns") - pl.col("time_ns")).sum().cast(pl.Float64).alias("wait"),
        pl.col("__at").sum().alias("at"),
        (pl.col("time_ns") - pl.col("__at")).sum().alias("below"),
        pl.col("time_basis").str.starts_with("transfer").all().alias("aligned"),
    )
    expo = comm.filter(pl.col("by") == "type").select("rank", "step", pl.col("key").alias("coll_type"), "exposed_ns")
    out = expo.join(parts, on=["rank", "step", "coll_type"], how="inner")
    total = pl.col("wait") + pl.col("at") + pl.col("below")
    return (
        out.with_columns(
            (pl.col("exposed_ns") * pl.col("wait") / total).round(0).cast(pl.Int64).alias("exposed_wait_ns"),
            (pl.col("exposed_ns") * pl.col("at") / total).round(0).cast(pl.Int64).alias("exposed_link_speed_ns"),
        )
        .with_columns(
            (pl.col("exposed_ns") - pl.col("exposed_wait_ns") - pl.col("exposed_link_speed_ns")).alias("exposed_below_reference_ns"),
            pl.when(pl.col("aligned")).then(pl.lit("wait measured (ranks aligned)"))
            .otherwise(pl.lit("one rank of the group: the wait for peers cannot be separated and stays in 'below reference'"))
            .alias("split_basis"),
        )
        .select("rank", "step", "coll_type", "exposed_ns", "exposed_wait_ns", "exposed_link_speed_ns",
                "exposed_below_reference_ns", "split_basis")
        .sort("rank", "step", "coll_type")
    )
