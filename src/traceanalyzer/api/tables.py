"""The optional per-rank tables: kernels and ops, launches and the launch queue, user annotations.
"""

from __future__ import annotations as _postponed  # postponed annotations; the name ``annotations`` is the verb's

from typing import TYPE_CHECKING, Any, Iterable, Literal, Unpack, cast

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import (
    AnalysisOptions, EngineOptions, PathLike, Source, _check_table_args, _choice, _device, _ints, _model_flops_and_peak, _regex,
)
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import resolve
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.model import RunConfig


def _side_meant(value: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``annotations(..., source=...)`` is the old name of ``side``: the trace is given
    otherwise (by position, or as ``trace``, its old name)."""
    return bool(args) or "trace" in kwargs


def analysis_with_tables(source: Source, step_range: str | None = DEFAULT_STEP, **options: Any) -> Analysis:
    """The :class:`~traceanalyzer.classify.Analysis` of ``source`` with the per-kernel and per-op
    rows (``kernel_stats``, ``op_stats``). An analysis is given them with the options it was made
    with; otherwise ``options`` are the classification's (``recompute_range``, ``comm_kernels``,
    ``bus_bw_gbps``) and, for files, ``cache``, ``workers``, ``engine``, ``address``, ``quiet``."""
    return resolve(source, step_range, tables=("kernel_stats",), **options)


@renamed_parameter("rank", "ranks", version=RENAMED_IN)
@renamed_parameter("step", "steps", version=RENAMED_IN)
@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def kernels(
    source: Source,
    *,
    name: str | None = None,
    ranks: int | Iterable[int] | None = None,
    steps: int | Iterable[int] | None = None,
    sort: str = "total",
    top: int | None = None,
    precision: str | None = None,
    step_range: str | None = DEFAULT_STEP,
    **options: Unpack[AnalysisOptions],
) -> pl.DataFrame:
    """Every GPU kernel (and memcpy / memset) by name: calls, time statistics, its exact share
    of the breakdown, and achieved TFLOP/s where its launching op recorded shapes.

    Parameters
    ----------
    source:
        Trace file(s) or a directory of rank traces (``.json``, ``.json.gz``, Nsight Systems
        ``.sqlite``), a loaded :class:`~traceanalyzer.schema.Trace`, or an
        :class:`~traceanalyzer.classify.Analysis` (given its per-kernel rows with the options it
        was made with; never changed).
    name:
        Regex (Python ``re`` syntax, searched anywhere in the name) the kernel name must match.
    ranks, steps:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        ``total`` (summed duration, default), ``bucket`` (share of the breakdown), ``calls``,
        ``mean``, ``p50``, ``p99``, ``max``, ``tflops`` or ``name``; biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision of kernels whose name
        states none (bytes and the roofline need it; a name such as ``..._bf16_...`` wins).
    step_range:
        As in :func:`analyze` (default ``ProfilerStep``; ``None``: each rank's whole GPU span is
        step 0). Ignored for an analysis.
    options:
        ``recompute_range``, ``comm_kernels``, ``bus_bw_gbps`` (classification, as in
        :func:`analyze`), ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` (loading
        files). Ignored for an analysis.

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

    Raises
    ------
    InvalidArgument
        A bad ``name`` regex, ``sort``, ``precision`` or ``top``.

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
    from traceanalyzer.classify.kernelstats import kernel_table

    _check_table_args(name, sort, precision, top)
    an = analysis_with_tables(source, step_range, **options)
    rank_list = _ints(ranks)
    return kernel_table(cast(pl.DataFrame, an.kernel_stats), an.steps, _device(an, rank_list), name=name, rank=rank_list, step=_ints(steps),
                        precision=precision, sort=sort, top=top)


@renamed_parameter("rank", "ranks", version=RENAMED_IN)
@renamed_parameter("step", "steps", version=RENAMED_IN)
@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def ops(
    source: Source,
    *,
    name: str | None = None,
    ranks: int | Iterable[int] | None = None,
    steps: int | Iterable[int] | None = None,
    sort: str = "gpu",
    top: int | None = None,
    precision: str | None = None,
    step_range: str | None = DEFAULT_STEP,
    **options: Unpack[AnalysisOptions],
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
    ranks, steps:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        ``gpu`` (the default): the GPU time of the op's kernels; or as for :func:`kernels`
        (``total`` is the host time); biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision used for the FLOPs'
        roofline where the op's kernels' names state none.
    step_range:
        As for :func:`kernels`.
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

    Raises
    ------
    InvalidArgument
        As for :func:`kernels`.

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
    from traceanalyzer.classify.opstats import op_table

    _check_table_args(name, sort, precision, top)
    an = analysis_with_tables(source, step_range, **options)
    rank_list = _ints(ranks)
    return op_table(cast(pl.DataFrame, an.op_stats), an.steps, _device(an, rank_list), name=name, rank=rank_list, step=_ints(steps),
                    precision=precision, sort=sort, top=top)


@renamed_parameter("by", "per", version=RENAMED_IN)
@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def launches(
    source: Source,
    *,
    per: Literal["step", "kernel"] = "step",
    threshold: float = 0.10,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Unpack[EngineOptions],
) -> pl.DataFrame:
    """Kernel launch statistics: per step (default) or one row per launched GPU item.

    Parameters
    ----------
    source:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
        (given the launch table with the options it was made with: its steps stay its steps).
    per:
        ``"step"``: one row per (rank, step); ``"kernel"``: one row per launched GPU item
        (kernel, memcpy, memset) that has a launch record.
    threshold:
        With ``per="step"``: the share of the step (0 to 1) the GPU must sit idle waiting for a
        launch call that had not begun yet for the step to count as launch-bound.
    step_range:
        As in :func:`analyze`. Ignored for an analysis.
    comm_kernels:
        As in :func:`analyze`. Ignored for an analysis.
    engine_kw:
        ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` for files.

    Returns
    -------
    polars.DataFrame
        ``per="step"``: ``rank, step, kernels, memcpy, memset, launched,
        launch_latency_{mean,p50,p99,max}_ns, launch_delay_p50_ns, launch_cpu_p50_ns,
        launch_cpu_ns, gpu_work_p50_ns, duration_ns, idle_ns, idle_host_bound_ns,
        host_bound_share, launch_bound`` (percentiles: nearest rank).
        ``per="kernel"``: ``rank, step, pid, stream, kind, name, cls, correlation, launch_name,
        launch_ns, launch_end_ns, start_ns, end_ns, launch_latency_ns, launch_delay_ns, cpu_ns,
        gpu_ns`` (``step`` null outside every step window). Integer nanoseconds on the trace's
        clock; ``launch_latency_ns`` = GPU start − launch call start, ``launch_delay_ns`` = GPU
        start − launch call end (HTA's launch delay before its clip at 0).

    Raises
    ------
    InvalidArgument
        ``per`` is not ``"step"`` or ``"kernel"``, or ``threshold`` is not between 0 and 1.

    Example
    -------
    The bundled MI300X trace (run from the repository root): the host runs ~25 ms ahead of the
    GPU, so the kernels that start inside a step's host range were launched earlier (in step 15's
    range, before the profile began: no launch record), and no step is launch- or CPU-bound:

    >>> import traceanalyzer as ta
    >>> per_step = ta.launches("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz")
    >>> per_step.select("step", "kernels", "launched", "launch_latency_p50_ns", "launch_bound", "cpu_bound").rows()
    [(15, 637, 0, None, False, False), (16, 406, 354, 27148331, False, False), (17, 459, 483, 22017999, False, False)]
    >>> ta.launches("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz", per="kernel").height
    2685
    """
    from traceanalyzer.classify.launches import with_launch_bound

    _choice("per", per, ("step", "kernel"))
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise InvalidArgument(f"threshold must be a share between 0 and 1, got {threshold!r}")
    table = "launches" if per == "step" else "launch_rows"
    a = resolve(source, step_range, tables=(table,), comm_kernels=comm_kernels, **engine_kw)
    df = a.extras.get(table)
    if df is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64})
    return with_launch_bound(df, threshold) if per == "step" else df


@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def queue_length(
    source: Source,
    *,
    series: bool = False,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Unpack[EngineOptions],
) -> pl.DataFrame:
    """Launch queue length per (rank, device, stream): a summary, or the step function itself.

    Parameters
    ----------
    source:
        As for :func:`launches`.
    series:
        ``False`` (default): one summary row per stream; ``True``: the time series.
    step_range, comm_kernels, engine_kw:
        As for :func:`launches`.

    Returns
    -------
    polars.DataFrame
        Summary: ``rank, pid, stream, launched, span_ns, queued_mean, queued_max,
        outstanding_mean, outstanding_max`` (means weighted by time over ``span_ns``, from the
        first launch to the last end on the stream) and HTA's statistics of the queued count
        ``hta_count, hta_mean, hta_std, hta_min, hta_p25, hta_p50, hta_p75, hta_max`` (one value
        per launch and per start, not weighted by time). Series: ``rank, pid, stream, t_ns,
        queued, outstanding``; each value holds from ``t_ns`` (integer ns) to the next row.
        ``queued`` = launched and not started; ``outstanding`` = launched and not finished.

    Example
    -------
    The bundled MI300X trace: up to 1,840 kernels queued on stream 0:

    >>> import traceanalyzer as ta
    >>> ta.queue_length("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz").select(
    ...     "stream", "launched", "queued_max", "outstanding_max").rows()
    [(0, 2673, 1840, 1840), (4, 12, 8, 9)]
    """
    table = "queue_series" if series else "queue"
    a = resolve(source, step_range, tables=(table,), comm_kernels=comm_kernels, **engine_kw)
    df = a.extras.get(table)
    if df is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "pid": pl.String, "stream": pl.Int64})
    return df


@renamed_parameter("source", "side", version=RENAMED_IN, when=_side_meant)
@renamed_parameter("trace", "source", version=RENAMED_IN)
@renamed_parameter("by", "per", version=RENAMED_IN)
@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def annotations(
    source: Source,
    *,
    name: str | None = None,
    level: int | None = None,
    side: Literal["auto", "gpu", "host"] = "auto",
    per: Literal["step", "rank", "name"] = "step",
    config: PathLike | RunConfig | None = None,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Unpack[EngineOptions],
) -> pl.DataFrame:
    """GPU time under each NVTX / ``record_function`` range, split into the partition's buckets.

    Parameters
    ----------
    source:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
        (given the annotation table with the options it was made with).
    name:
        Regex (polars dialect, searched anywhere) the range name must match; ``None``: all.
    level:
        Only ranges at this nesting level (0: outermost on their thread or stream).
    side:
        ``"gpu"``: Kineto's GPU-side range copies (``gpu_user_annotation``, HTA's input);
        ``"host"``: host ranges (``record_function``, NVTX) projected onto the GPU through the
        launches made inside them; ``"auto"`` (default): ``gpu`` for ranks that have GPU-side
        ranges, else ``host``.
    per:
        ``"step"`` (default): one row per (rank, step, source, name, level: ``source`` is the
        side the range was read from); ``"rank"``: summed
        over steps (``steps`` column: how many); ``"name"``: summed over ranks and steps
        (``ranks`` column).
    config:
        Run configuration (a TOML path, or a :class:`~traceanalyzer.model.RunConfig`): adds
        ``model_flops`` (per GPU) and ``mfu`` columns (for a range that covers part of a step, MFU is
        its model FLOPs share of the step over its time: ``docs/annotations.md``).
    step_range:
        As in :func:`analyze`. Ignored for an analysis.
    comm_kernels:
        As in :func:`analyze`. Ignored for an analysis.
    engine_kw:
        ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` for files.

    Returns
    -------
    polars.DataFrame
        Columns ``rank, step, source, name, level, count, gpu_work, gpu_work_ns, duration_ns,
        compute_ns, recompute_ns, exposed_comm_ns, other_ns, idle_ns, overlapped_comm_ns,
        outside_ns`` (+ ``model_flops, mfu`` with ``config``), sorted by ``duration_ns``
        descending. Times are integer nanoseconds; the five buckets sum exactly to
        ``duration_ns`` (the range's GPU time inside step windows), ``outside_ns`` is its GPU
        time in no step. ``count``: range instances; ``gpu_work``/``gpu_work_ns``: GPU items
        under them and their summed duration.

    Raises
    ------
    InvalidArgument
        A bad ``name`` regex, ``level``, ``side`` or ``per``.
    ConfigError
        ``config`` is missing or invalid.

    Example
    -------
    The bundled MI300X trace (run from the repository root), its optimizer ranges summed over
    steps: 3 instances, 90.761 µs of GPU time of which 90.756 µs compute. Its host runs ~25 ms
    ahead of the GPU, so the optimizer's kernels run after the last step's host range has ended:
    outside every step, unless the whole trace is one step (``step_range=None``):

    >>> import traceanalyzer as ta
    >>> mi300x = "fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz"
    >>> ta.annotations(mi300x, name="Optimizer", per="name").select("name", "count", "duration_ns", "outside_ns").rows()
    [('Optimizer.step#SGD.step', 3, 0, 90762)]
    >>> df = ta.annotations(mi300x, name="Optimizer", per="name", step_range=None)
    >>> df.select("name", "count", "duration_ns", "compute_ns", "idle_ns").rows()
    [('Optimizer.step#SGD.step', 3, 90761, 90756, 5)]
    """
    from traceanalyzer.classify import annotation_ranges as ann

    _regex("name", name, polars=True)
    _choice("side", side, ann.SOURCES)
    _choice("per", per, ("step", "rank", "name"))
    if level is not None and (not isinstance(level, int) or isinstance(level, bool) or level < 0):
        raise InvalidArgument(f"level must be a nesting level (0, 1, ...), got {level!r}")
    a = resolve(source, step_range, tables=("annotations",), comm_kernels=comm_kernels, **engine_kw)
    table = a.extras.get("annotations")
    if table is None:
        table = ann.empty_table()
    peak = None
    if config is not None:
        flops, peak = _model_flops_and_peak(config, a)
        table = ann.with_mfu(table, a.steps, flops, peak)
    out = ann.select(table, name=name, level=level, source=side, by=per)
    if peak is not None and per != "step":
        out = ann.add_mfu(out, peak)
    return out
