"""Label every GPU activity: communication, recompute, compute or other.

* **communication**: a kernel whose name is an NCCL/RCCL kernel (``nccl*``, ``rccl*``, older
  ``ncclKernel_*``, newer ``ncclDevKernel_*``, vLLM's ``cross_device_reduce``), or any kernel
  launched by a ``record_param_comms`` op (catches ``ncclDevKernel_Generic`` and renamed kernels).
* **recompute**: GPU work launched by a forward op re-executed during backward (activation
  checkpointing). A host op is a recompute root when it has an autograd ``Sequence number`` with
  ``Fwd thread id`` 0, is not itself an autograd node, and runs inside an
  ``autograd::engine::evaluate_function`` range on its thread (reentrant and non-reentrant
  checkpointing alike; selective-AC cache hits launch no kernel and so add nothing). Every op
  and runtime call nested under a root is recompute, and so is the GPU work they launched
  (joined by correlation id and by External id).
* **compute**: every other kernel.
* **other**: memcpy, memset and other timed GPU work.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.intervals import contained_in
from traceanalyzer.schema import GPU_WORK_KINDS

COMM_KERNEL = r"(?i)^(nccl|rccl)|ncclkernel|nccldevkernel|cross_device_reduce"
COMM_LAUNCHERS = ["record_param_comms"]
EVALUATE_FUNCTION = "autograd::engine::evaluate_function"
CLASSES = ["compute", "recompute", "comm", "other"]


def _thread_key() -> list[str]:
    return ["rank", "pid", "tid"]


def recompute_links(events: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Host-side recompute marking: returns (external ids, correlations) of recomputed work,
    each as a frame with columns ``rank`` and ``external_id`` / ``correlation``."""
    host = events.filter(pl.col("kind").is_in(["cpu_op", "annotation", "runtime"])).select(
        *_thread_key(), "kind", "name", "start_ns", "end_ns", "seq", "fwd_tid", "external_id", "correlation"
    )
    evaluate = host.filter(pl.col("name").str.starts_with(EVALUATE_FUNCTION))
    candidates = host.filter(
        (pl.col("kind") == "cpu_op")
        & pl.col("seq").is_not_null()
        & (pl.col("fwd_tid") == 0)
        & ~pl.col("name").str.starts_with("autograd::")
        & ~pl.col("name").str.contains("Backward")
    )
    # roots are few: materialise them once, then sweep only the threads that hold one (same
    # result; nothing to sort at all in the common trace without activation checkpointing)
    roots = contained_in(candidates, evaluate, _thread_key(), "in_backward").filter(pl.col("in_backward")).collect().lazy()
    root_threads = host.join(roots.select(_thread_key()).unique(), on=_thread_key(), how="semi")
    under = contained_in(root_threads, roots, _thread_key(), "recompute").filter(pl.col("recompute"))
    ext = under.filter(pl.col("external_id").is_not_null()).select("rank", "external_id").unique()
    corr = under.filter(pl.col("correlation").is_not_null() & (pl.col("kind") == "runtime")).select(
        "rank", "correlation"
    ).unique()
    return ext, corr


def label_gpu(events: pl.DataFrame) -> pl.DataFrame:
    """GPU work events with a ``cls`` column (one of ``CLASSES``)."""
    ev = events.lazy()
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).with_row_index("__gpu")
    comm_ext = (
        ev.filter((pl.col("kind") == "cpu_op") & pl.col("name").is_in(COMM_LAUNCHERS) & pl.col("external_id").is_not_null())
        .select("rank", "external_id")
        .unique()
        .with_columns(pl.lit(True).alias("__comm_link"))
    )
    rc_ext, rc_corr = recompute_links(ev)
    gpu = (
        gpu.join(comm_ext, on=["rank", "external_id"], how="left")
        .join(rc_ext.with_columns(pl.lit(True).alias("__rc_e")), on=["rank", "external_id"], how="left")
        .join(rc_corr.with_columns(pl.lit(True).alias("__rc_c")), on=["rank", "correlation"], how="left")
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
        gpu.with_columns(cls.alias("cls"), (is_comm & (pl.col("__rc_e").fill_null(False) | pl.col("__rc_c").fill_null(False))).alias("comm_in_recompute"))
        .sort("__gpu")
        .drop("__gpu", "__comm_link", "__rc_e", "__rc_c")
        .collect()
    )
