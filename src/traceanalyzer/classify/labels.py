"""Label every GPU activity: communication, recompute, compute or other.

* **communication**, by evidence: a kernel whose name is in :data:`COMM_LIBRARIES` (NCCL / RCCL,
  MSCCL / MSCCL++, DeepEP, NVSHMEM, Transformer Engine userbuffers, the custom all-reduce kernels
  of vLLM / SGLang / TensorRT-LLM / PyTorch symmetric memory), a kernel matching a user pattern
  (``--comm-kernel REGEX``), or any kernel launched by a ``record_param_comms`` op (catches
  ``ncclDevKernel_Generic`` and renamed kernels). Names in :data:`NOT_COMM` (DeepEP's layout
  kernel, which only computes a routing table) are never communication by name. gloo runs on
  the CPU: it launches no GPU kernel and shows up as the GPU waiting on the host.
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
from traceanalyzer.errors import ConfigError
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: Known communication kernels: (library, regex on the kernel name, collective type, dimension).
#: Regexes are case-insensitive and searched anywhere in the (demangled) name, so ``void ``,
#: template arguments and namespaces do not matter. Rows are tried in order; the first match gives
#: the type and the dimension (``None``: from the linked collective / process group instead).
#: Where the names come from (public source, ``__global__`` functions):
#: NCCL ``src/device`` (``ncclKernel_*``, ``ncclDevKernel_*``), ROCm/rccl (same names, plus
#: ``mscclKernel_*``), microsoft/mscclpp (namespace ``mscclpp::``: ``allreduceFullmesh``,
#: ``allgatherFullmesh``, ``executionKernel``...), deepseek-ai/DeepEP ``csrc/kernels``
#: (namespace ``deep_ep::`` with ``internode``, ``intranode``, ``internode_ll``, ``elastic``:
#: ``notify_dispatch``, ``dispatch``, ``cached_notify``, ``combine``, ``barrier``,
#: ``pp_send_recv``; DeepSeek's published profiles spell the namespace ``dpsk::ep::``), NVSHMEM
#: (``nvshmemi_*`` and on-stream collectives ``*_on_stream_kernel``) and PyTorch's NVSHMEM
#: all-to-all (``c10d::nvshmem_extension::allToAllV``), NVIDIA/TransformerEngine
#: ``comm_gemm_overlap/userbuffers/userbuffers.cu`` (``userbuffers_fp16_sum_inplace_gpu_{rw,rr,mc}``
#: all-reduce, ``..._rs``/``..._rs_oop`` reduce-scatter, ``..._ag`` all-gather,
#: ``kuserbuffers_push*/pull*`` send/recv), vllm-project/vllm and sgl-project/sglang
#: ``custom_all_reduce.cuh`` (``cross_device_reduce_1stage/2stage``), NVIDIA/TensorRT-LLM
#: ``customAllReduceKernels.cu`` (``oneShotAllReduceKernel``, ``twoShotAllReduceKernel``,
#: ``allreduce_fusion_kernel*``), PyTorch symmetric memory (``one_shot_all_reduce_kernel``,
#: ``two_shot_all_reduce_kernel``, ``multimem_all_reduce_kernel``).
COMM_LIBRARIES: list[tuple[str, str, str | None, str | None]] = [
    ("NCCL/RCCL", r"^(void )?(nccl|rccl)|ncclkernel|nccldevkernel", None, None),
    ("MSCCL/MSCCL++", r"msccl.*(reduce_?scatter|reducescatter)", "reduce_scatter", None),
    ("MSCCL/MSCCL++", r"msccl.*(all_?gather)", "all_gather", None),
    ("MSCCL/MSCCL++", r"msccl.*(all_?reduce)", "all_reduce", None),
    ("MSCCL/MSCCL++", r"msccl.*(all_?to_?all)", "all_to_all", None),
    ("MSCCL/MSCCL++", r"msccl", None, None),
    ("DeepEP", r"(deep_ep|dpsk::ep)::.*pp_send_recv", "send_recv", "PP"),
    ("DeepEP", r"(deep_ep|dpsk::ep)::.*barrier", "barrier", "EP"),
    ("DeepEP", r"(deep_ep|dpsk::ep)::", "all_to_all", "EP"),
    ("NVSHMEM", r"nvshmem.*all_?to_?all|nvshmem.*alltoallv|alltoall\w*_on_stream_kernel", "all_to_all", "EP"),
    ("NVSHMEM", r"barrier\w*_on_stream_kernel|sync\w*_on_stream_kernel", "barrier", None),
    ("NVSHMEM", r"(fcollect|allgather)\w*_on_stream_kernel", "all_gather", None),
    ("NVSHMEM", r"(broadcast|bcast)\w*_on_stream_kernel", "broadcast", None),
    ("NVSHMEM", r"reduce\w*_on_stream_kernel", "all_reduce", None),
    ("NVSHMEM", r"nvshmem", None, None),
    ("TE userbuffers", r"k?userbuffers_\w*_ag(_|<|\(|$)", "all_gather", "TP"),
    ("TE userbuffers", r"k?userbuffers_\w*_rs(_|<|\(|$)", "reduce_scatter", "TP"),
    ("TE userbuffers", r"kuserbuffers_(push|pull)", "send_recv", "TP"),
    ("TE userbuffers", r"userbuffers_fp16_sum_inplace_gpu_(rw|rr|mc)(<|\(|$)", "all_reduce", "TP"),
    ("TE userbuffers", r"(^|[^a-z])k?userbuffers_", None, "TP"),
    ("custom all-reduce", r"cross_device_reduce_(1|2)stage", "all_reduce", "TP"),
    ("custom all-reduce", r"(one|two)_?shot_?all_?reduce|allreduce_fusion_kernel|multimem_all_reduce|customallreduce", "all_reduce", "TP"),
]
#: Names that are never communication by name (still by ``record_param_comms`` linkage).
NOT_COMM = [r"(deep_ep|dpsk::ep)::(legacy::)?layout::"]


def comm_kernel_pattern(extra: list[str] | None = None) -> str:
    """One case-insensitive regex matching every known communication kernel and ``extra``."""
    return "(?i)" + "|".join(f"(?:{p})" for p in [*(r for _, r, _, _ in COMM_LIBRARIES), *(extra or [])])


COMM_KERNEL = comm_kernel_pattern()


def check_comm_pattern(pattern: str) -> None:
    """Raise :class:`~traceanalyzer.errors.ConfigError` unless ``pattern`` is a regex the
    analysis can use (polars' regex dialect: no look-around, no back-references)."""
    try:
        pl.Series([""]).str.contains(user_pattern([pattern]))
    except Exception as exc:  # polars raises ComputeError on a bad pattern
        why = [ln[len("error: "):] for ln in str(exc).splitlines() if ln.startswith("error: ")]
        raise ConfigError(f"`comm_kernels` {pattern!r} is not a valid regex ({why[0] if why else 'parse error'})") from None


def user_pattern(patterns: list[str]) -> str:
    """The user's ``--comm-kernel`` regexes as one case-insensitive regex."""
    return "(?i)" + "|".join(f"(?:{p})" for p in patterns)
_NOT_COMM = "(?i)" + "|".join(f"(?:{p})" for p in NOT_COMM)


def library_expr(col: str = "name", field: int = 0) -> pl.Expr:
    """From a kernel name: its library (``field=0``), collective type (2) or dimension (3)
    according to :data:`COMM_LIBRARIES` (first matching row); null when no row matches."""
    expr = pl.lit(None, pl.String)
    for row in reversed(COMM_LIBRARIES):
        expr = pl.when(pl.col(col).str.contains(f"(?i){row[1]}")).then(pl.lit(row[field], pl.String)).otherwise(expr)
    return pl.when(pl.col(col).str.contains(_NOT_COMM)).then(pl.lit(None, pl.String)).otherwise(expr)
COMM_LAUNCHERS = ["record_param_comms"]
EVALUATE_FUNCTION = recompute.EVALUATE_FUNCTION
CLASSES = ["compute", "recompute", "comm", "other"]


def recompute_links(events: pl.LazyFrame, pattern: str | None = None) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Host-side recompute marking (see :mod:`.recompute`): returns (external ids,
    correlations) of recomputed work, frames ``rank, external_id, root_pos`` and
    ``rank, correlation, root_pos``."""
    return recompute.recompute_links(recompute.recompute_ops(events, pattern))


def label_gpu(
    events: pl.DataFrame,
    recompute_ops: pl.DataFrame | None = None,
    pattern: str | None = None,
    comm_kernels: list[str] | None = None,
) -> pl.DataFrame:
    """GPU work events with a ``cls`` column (one of ``CLASSES``), ``comm_in_recompute`` and
    ``rc_root`` (``pos`` of the top-level recomputed host op that launched it, else null).

    ``recompute_ops``: the frame of :func:`.recompute.recompute_ops` when already computed;
    ``pattern``: extra host-range regex treated like ``CheckpointFunctionBackward``;
    ``comm_kernels``: extra kernel-name regexes (case-insensitive) that are communication."""
    ev = events.lazy()
    # the labels are computed on the columns they read and joined to the GPU rows once, by
    # position: the joins and the sort then carry five columns, not all of them
    wide = events.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    gpu = wide.lazy().select("rank", "kind", "name", "external_id", "correlation").with_row_index("__gpu")
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
    by_name = pl.col("name").str.contains(COMM_KERNEL) & ~pl.col("name").str.contains(_NOT_COMM)
    if comm_kernels:
        by_name = by_name | pl.col("name").str.contains(user_pattern(comm_kernels))
    # the name patterns on each distinct name once (a trace has tens of kernel names, not tens of thousands)
    names = gpu.select(pl.col("name").unique()).with_columns(by_name.fill_null(False).alias("__by_name"))
    gpu = gpu.join(names, on="name", how="left", nulls_equal=True)
    is_comm = is_kernel & (pl.col("__by_name") | pl.col("__comm_link").fill_null(False))
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
    labels = (
        gpu.sort("__gpu")
        .select(
            cls.alias("cls"),
            (is_comm & (pl.col("__rc_e").fill_null(False) | pl.col("__rc_c").fill_null(False))).alias("comm_in_recompute"),
            pl.when(is_kernel).then(pl.coalesce("__root_c", "__root_e")).alias("rc_root"),
        )
        .collect(engine=query_engine())
    )
    return wide.hstack(labels.get_columns())
