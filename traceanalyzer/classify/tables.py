"""The kernel and op tables as Python verbs: :func:`kernels` and :func:`ops` (polars frames).

Both take trace files / a directory of rank traces, a loaded :class:`~traceanalyzer.schema.Trace`,
or an :class:`~traceanalyzer.classify.Analysis` that already holds the per-kernel rows (from
:func:`analysis_with_tables`), and run the same rank engine as the command line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Union

import polars as pl

from traceanalyzer.classify.kernelstats import SORT_KEYS, kernel_table
from traceanalyzer.classify.opstats import op_table
from traceanalyzer.classify.roofline import ELEMENT_BYTES
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import ConfigError

Source = Union[str, Path, Iterable[Union[str, Path]], "Trace", "Analysis"]  # noqa: F821


def check_filters(name: str | None, sort: str, precision: str | None, top: int | None) -> None:
    """Exit-7 errors for a bad ``--name`` regex, ``--sort`` key, ``--precision`` or ``--top``."""
    if name is not None:
        try:
            re.compile(name)
        except re.error as exc:
            raise ConfigError(f"--name is not a valid regex: {exc}") from None
    if sort not in SORT_KEYS:
        raise ConfigError(f"--sort {sort!r} is not one of {', '.join(SORT_KEYS)}")
    if precision is not None and precision not in ELEMENT_BYTES:
        raise ConfigError(f"--precision {precision!r} is not one of {', '.join(ELEMENT_BYTES)}")
    if top is not None and top < 1:
        raise ConfigError(f"--top must be at least 1, got {top}")


def analysis_with_tables(source: Source, step_name: str | None = DEFAULT_STEP, **options):
    """The :class:`~traceanalyzer.classify.Analysis` of ``source`` with the per-kernel and
    per-op rows (``kernel_stats``, ``op_stats``). ``options``: the other fields of
    :class:`traceanalyzer.engine.Options` (``recompute_pattern``, ``comm_kernels``...), and for
    files ``workers``, ``engine``, ``quiet``."""
    from traceanalyzer.classify import Analysis
    from traceanalyzer.engine import Options, analyse, analyse_trace
    from traceanalyzer.schema import Trace

    if isinstance(source, Analysis):
        return with_tables(source)
    run = {k: options.pop(k) for k in ("workers", "engine", "address", "quiet") if k in options}
    opts = Options(step_name=step_name, tables=True, **options)
    if isinstance(source, Trace):
        return analyse_trace(source, opts)
    paths = [source] if isinstance(source, (str, Path)) else list(source)
    run.setdefault("quiet", True)
    return analyse([Path(p) for p in paths], opts, **run)


def table_rows(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame,
               seg: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(kernel_stats, op_stats)``: the per-kernel and per-op rows of the ranks in these frames
    (:func:`~traceanalyzer.classify.kernelstats.kernel_stat_rows`,
    :func:`~traceanalyzer.classify.opstats.op_stat_rows`); ``gpu`` is the labelled GPU work,
    ``seg`` the step windows' segments sorted by rank and start when already built."""
    from traceanalyzer.classify.kernelstats import kernel_stat_rows
    from traceanalyzer.classify.opstats import op_stat_rows
    from traceanalyzer.classify.partition import segment_frame

    if seg is None:
        seg = segment_frame(gpu, windows).sort("rank", "t0").collect()
    return kernel_stat_rows(events, gpu, windows, seg), op_stat_rows(events, gpu, windows)


def with_tables(analysis, *, if_possible: bool = False):
    """``analysis`` with its per-kernel and per-op rows, computed from its events and GPU work on
    first use and kept in it (every rank and step is its own, so the rows equal those the rank
    workers compute; a :func:`~traceanalyzer.api.select` cut gives the rows of its ranks and
    steps). Without events to compute them from: ConfigError, or with ``if_possible`` the
    analysis as it is."""
    if analysis.kernel_stats is not None and analysis.op_stats is not None:
        return analysis
    if not analysis.trace.events.height or not analysis.gpu.height:
        if if_possible:
            return analysis
        raise ConfigError("this analysis has no per-kernel rows and no events to compute them from: pass the trace (or files) instead")
    analysis.kernel_stats, analysis.op_stats = table_rows(analysis.trace.events, analysis.gpu, analysis.windows)
    return analysis


def _device(analysis, rank: list[int] | None) -> str | None:
    meta = analysis.trace.meta
    if rank:
        meta = meta.filter(pl.col("rank").is_in(rank))
    names = meta.get_column("device_name").drop_nulls()
    return names[0] if names.len() else None


def _ranks(rank: int | Iterable[int] | None) -> list[int] | None:
    if rank is None:
        return None
    return [int(rank)] if isinstance(rank, int) else [int(r) for r in rank]


def kernels(
    source: Source,
    *,
    name: str | None = None,
    rank: int | Iterable[int] | None = None,
    step: int | Iterable[int] | None = None,
    sort: str = "total",
    top: int | None = None,
    precision: str | None = None,
    step_name: str | None = DEFAULT_STEP,
    **options,
) -> pl.DataFrame:
    """Every GPU kernel (and memcpy / memset) by name: calls, time statistics, its exact share
    of the breakdown, and achieved TFLOP/s where its launching op recorded shapes.

    Parameters
    ----------
    source:
        Trace file(s) or a directory of rank traces (``.json``, ``.json.gz``, Nsight Systems
        ``.sqlite``), a loaded :class:`~traceanalyzer.schema.Trace`, or an Analysis from
        :func:`analysis_with_tables`.
    name:
        Regex (Python ``re`` syntax, searched anywhere in the name) the kernel name must match.
    rank, step:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        ``total`` (summed duration, default), ``bucket`` (share of the breakdown), ``calls``,
        ``mean``, ``p50``, ``p99``, ``max``, ``tflops`` or ``name``; biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision of kernels whose name
        states none (bytes and the roofline need it; a name such as ``..._bf16_...`` wins).
    step_name:
        The step range's name (default ``ProfilerStep``); ``None``: each rank's whole GPU span
        is step 0.
    options:
        ``recompute_pattern``, ``comm_kernels``, ``bus_bw_gbps`` (classification, as for
        ``breakdown``), ``workers``, ``engine``, ``quiet`` (loading files).

    Returns
    -------
    polars.DataFrame
        One row per kernel name and class, times in integer nanoseconds:
        ``name``, ``bucket`` (compute / recompute / comm / other), ``kind`` (kernel, memcpy,
        memset, gpu_other), ``streams`` (e.g. ``"7,20"``), ``ranks``, ``calls``, ``total_ns``,
        ``mean_ns`` (float), ``p50_ns``, ``p99_ns`` (nearest-rank percentiles: one of the
        durations), ``min_ns``, ``max_ns``, ``bucket_ns`` (the kernel's exact share of its
        bucket of the breakdown: over the kernels of a class these sum exactly to
        compute / recompute / exposed_comm / other), ``share_pct`` (``bucket_ns`` in percent of
        the selected rank-steps' wall time), ``precision``, ``flops_calls`` (calls with known
        FLOPs), ``flops``, ``bytes`` (of those calls), ``tflops`` (achieved TFLOP/s over those
        calls' time), ``gbps`` (achieved GB/s), ``peak_tflops`` (dense peak of the device at
        that precision), ``roofline_pct`` (achieved over the roofline's attainable rate, %).

    Example
    -------
    The bundled 8-rank DLRM job on V100s (run from the repository root), its three biggest
    kernels: two NCCL kernels whose exposed part (``bucket_ns``) is 40 % of the ranks' step
    time, then a GEMM:

    >>> import traceanalyzer as ta
    >>> k = ta.kernels("fixtures/kineto/dlrm-v100-8rank", top=3)
    >>> k.select("bucket", "ranks", "calls", "total_ns", "bucket_ns").rows()
    [('comm', 8, 40, 37935000, 37248000), ('comm', 8, 24, 10607000, 9642000), ('compute', 8, 56, 409000, 409000)]
    >>> k["name"][2], round(k["share_pct"][0], 1)
    ('volta_sgemm_128x32_nt', 32.2)
    """
    check_filters(name, sort, precision, top)
    an = analysis_with_tables(source, step_name, **options)
    ranks = _ranks(rank)
    return kernel_table(an.kernel_stats, an.steps, _device(an, ranks), name=name, rank=ranks, step=_ranks(step),
                        precision=precision, sort=sort, top=top)


def ops(
    source: Source,
    *,
    name: str | None = None,
    rank: int | Iterable[int] | None = None,
    step: int | Iterable[int] | None = None,
    sort: str = "total",
    top: int | None = None,
    precision: str | None = None,
    step_name: str | None = DEFAULT_STEP,
    **options,
) -> pl.DataFrame:
    """Every host (CPU) op by name and input shapes: calls, host-time statistics, the GPU time
    of the kernels it launched, and FLOPs / achieved TFLOP/s / roofline where the shapes have a
    formula (GEMMs: ``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``; scaled
    dot-product / flash attention). Shapes need ``record_shapes=True`` in the profiler.

    Parameters
    ----------
    source:
        As for :func:`kernels`: trace file(s), a directory of rank traces, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an Analysis.
    name:
        Regex (Python ``re`` syntax, searched anywhere in the name) the op name must match.
    rank, step:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        As for :func:`kernels` (``total`` is the host time), and also ``gpu``: the GPU time of
        the op's kernels; biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision used for the FLOPs'
        roofline where the op's kernels' names state none.
    step_name:
        The step range's name (default ``ProfilerStep``); ``None``: each rank's whole GPU span
        is step 0.
    options:
        As for :func:`kernels`.

    Returns
    -------
    polars.DataFrame
        One row per op name and ``input_dims`` (JSON text of Kineto's ``Input Dims``; null
        without shapes), times in integer nanoseconds: ``name``, ``input_dims``, ``bucket`` (the
        class with most of its kernels' GPU time; null when it launched none), ``ranks``,
        ``calls``, ``total_ns`` (host time), ``mean_ns`` (float), ``p50_ns``, ``p99_ns``,
        ``min_ns``, ``max_ns`` (host), ``kernels`` (GPU work it launched itself: a parent op
        such as ``aten::linear`` shows none, its child ``aten::addmm`` shows them), ``gpu_ns``
        (their summed durations), ``gpu_share_pct`` (of the selected rank-steps' wall time),
        ``op_kind`` (gemm / attention / null), ``precision``, ``flops``, ``bytes`` (all calls),
        ``tflops`` and ``gbps`` (achieved, over ``gpu_ns``), ``peak_tflops``, ``roofline_pct``.

    Example
    -------
    The GEMMs of the bundled MI300X trace (run from the repository root; recorded with
    shapes): the classifier's small ``[10, 512] x [512, 1000]`` layer, 3 calls each, far below
    the device's bf16 roofline:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> o = ta.ops("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
    ...            name=r"^aten::(mm|addmm)$", sort="gpu", precision="bf16")
    >>> o.select("name", "input_dims", "calls", "gpu_ns").rows()[2]
    ('aten::addmm', '[[1000],[10,512],[512,1000],[],[]]', 3, 16597)
    >>> o.select(pl.col("tflops", "roofline_pct").round(2)).rows()
    [(1.16, 2.24), (1.72, 3.34), (1.85, 3.6)]
    """
    check_filters(name, sort, precision, top)
    an = analysis_with_tables(source, step_name, **options)
    ranks = _ranks(rank)
    return op_table(an.op_stats, an.steps, _device(an, ranks), name=name, rank=ranks, step=_ranks(step),
                    precision=precision, sort=sort, top=top)
