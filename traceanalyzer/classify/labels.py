"""Label every GPU activity: communication, recompute, compute or other.

* **communication**: a kernel whose name is an NCCL/RCCL kernel (``nccl*``, ``rccl*``, older
  ``ncclKernel_*``, newer ``ncclDevKernel_*``, vLLM's ``cross_device_reduce``), or any kernel
  launched by a ``record_param_comms`` op (catches ``ncclDevKernel_Generic`` and renamed kernels).
* **recompute**: GPU work launched by a host op that :mod:`.recompute` marks as re-executed
  during backward (activation checkpointing: forward-style ops with a ``Sequence number`` and
  ``Fwd thread id`` 0 inside ``autograd::engine::evaluate_function``, the contents of
  ``CheckpointFunctionBackward`` / ``_CheckpointFunctionBackward`` or of a user range pattern,
  minus selective-AC cache hits), joined by correlation id and by External id.
* **compute**: every other kernel.
* **other**: memcpy, memset and other timed GPU work.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify import recompute
from traceanalyzer.schema import GPU_WORK_KINDS

COMM_KERNEL = r"(?i)^(nccl|rccl)|ncclkernel|nccldevkernel|cross_device_reduce"
COMM_LAUNCHERS = ["record_param_comms"]
EVALUATE_FUNCTION = recompute.EVALUATE_FUNCTION
CLASSES = ["compute", "recompute", "comm", "other"]


def recompute_links(events: pl.LazyFrame, pattern: str | None = None) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Host-side recompute marking (see :mod:`.recompute`): returns (external ids,
    correlations) of recomputed work, frames ``rank, external_id, root_pos`` and
    ``rank, correlation, root_pos``."""
    return recompute.recompute_links(recompute.recompute_ops(events, pattern))


def label_gpu(events: pl.DataFrame, recompute_ops: pl.DataFrame | None = None, pattern: str | None = None) -> pl.DataFrame:
    """GPU work events with a ``cls`` column (one of ``CLASSES``), ``comm_in_recompute`` and
    ``rc_root`` (``pos`` of the top-level recomputed host op that launched it, else null).

    ``recompute_ops``: the frame of :func:`.recompute.recompute_ops` when already computed;
    ``pattern``: extra host-range regex treated like ``CheckpointFunctionBackward``."""
    ev = events.lazy()
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).with_row_index("__gpu")
    comm_ext = (
        ev.filter((pl.col("kind") == "cpu_op") & pl.col("name").is_in(COMM_LAUNCHERS) & pl.col("external_id").is_not_null())
        .select("rank", "external_id")
        .unique()
        .with_columns(pl.lit(True).alias("__comm_link"))
    )
    if recompute_ops is None:
        recompute_ops = recompute.recompute_ops(ev, pattern)
    rc_ext, rc_corr = recompute.recompute_links(recompute_ops)
    gpu = (
        gpu.join(comm_ext, on=["rank", "external_id"], how="left")
        .join(rc_ext.select("rank", "external_id", pl.col("root_pos").alias("__root_e"), pl.lit(True).alias("__rc_e")), on=["rank", "external_id"], how="left")
        .join(rc_corr.select("rank", "correlation", pl.col("root_pos").alias("__root_c"), pl.lit(True).alias("__rc_c")), on=["rank", "correlation"], how="left")
    )
    is_kernel = pl.col("kind") == "kernel"
    is_comm = is_kernel & (pl.col("name").str.contains(COMM_KERNEL) | pl.col("__comm_link").fill_null(False))
    is_rc = is_kernel & (pl.col("__rc_e").fill_null(False) | pl.col("__rc_c").fill_null(False))
    cls = (
        pl.when(is_comm)
        .then(pl.lit("comm"))
        .when(is_rc)
        .then(pl.lit("recompute"))
        .when(is_kernel)
        .then(pl.lit("compute"))
        .otherwise(pl.lit("other"))
    )
    return (
        gpu.with_columns(
            cls.alias("cls"),
            (is_comm & (pl.col("__rc_e").fill_null(False) | pl.col("__rc_c").fill_null(False))).alias("comm_in_recompute"),
            pl.when(is_kernel).then(pl.coalesce("__root_c", "__root_e")).alias("rc_root"),
        )
        .sort("__gpu")
        .drop("__gpu", "__comm_link", "__rc_e", "__rc_c", "__root_e", "__root_c")
        .collect()
    )
