"""The model against the trace and the run configuration alone: memory, the what-if, the waterfall
(reconcile), the prediction, and the cluster's own link baseline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, cast

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import (
    PathLike, Source, _baseline, _cache_arg, _choice, _config, _ints, _path, _paths, public,
)
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import analyze, resolve
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument
from traceanalyzer.results import PredictResult, ReconcileResult

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.model import RunConfig
    from traceanalyzer.reconciliation.footprint import MemoryResult


@renamed_parameter("trace", "source", version=RENAMED_IN)
@renamed_parameter("reserve_gb", "reserve_gib", version=RENAMED_IN)
@checked
def memory(
    source: Source | None = None,
    config: PathLike | RunConfig | None = None,
    *,
    megatron_args: PathLike | None = None,
    reserve_gib: float = 4.0,
    step_range: str | None = DEFAULT_STEP,
    gpu_only: bool = True,
    cache: bool | PathLike = False,
    workers: int | None = None,
    quiet: bool = True,
) -> MemoryResult:
    """Memory per GPU: the analytic prediction for a run configuration, and what a trace measured.

    Parameters
    ----------
    source:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`traceanalyzer.schema.Trace` or an :class:`~traceanalyzer.classify.Analysis`
        (its trace). Its Kineto ``[memory]`` events (recorded with
        ``torch.profiler.profile(profile_memory=True)``) give the allocated and reserved bytes
        over time per rank; its memcpy/memset events the copy bandwidth. None: prediction only.
    config:
        A run configuration (TOML path or :class:`~traceanalyzer.model.config.RunConfig`).
        None (and no ``megatron_args``): measurement only.
    megatron_args:
        Megatron-LM launch script, arguments or training log (with or instead of ``config``).
    reserve_gib:
        GiB (2^30 bytes) kept free for what the model does not count (CUDA context, NCCL and
        cuBLAS buffers, fragmentation); the verdict is ``total + reserve <= device memory``.
    step_range:
        Name of the host range that marks a training step (for the step of the peak).
    gpu_only:
        Keep the GPU allocator only (not the host's ``[memory]`` events).
    cache:
        Use the parse cache (True, or a directory), as :func:`traceanalyzer.parsers.load`.
    workers:
        Rank files read in parallel processes (default: one process for a small job, all
        cores for a large one; 1: in this process).
    quiet:
        No progress bar on standard error (``False``: the command line's bar, bytes read of
        the job).

    Returns
    -------
    MemoryResult
        ``predicted`` (component, bytes, gib, share, what), ``fit`` (one row: most loaded stage,
        total, device memory, reserve, headroom, fits, and the measured peaks beside them),
        ``measured`` (per rank/device: peak_allocated, peak_allocated_ns, peak_step,
        peak_reserved, peak_reserved_ns, source), ``timeline`` (rank, device, ts_ns, bytes,
        allocated, reserved, source), ``copies`` (rank, kind, name, count, bytes, busy_ns,
        gb_per_s). Bytes are bytes; times integer ns on the trace's time base.

    Raises
    ------
    traceanalyzer.errors.InvalidArgument
        A bad ``reserve_gib``, ``workers`` or ``source``, or nothing to do.
    traceanalyzer.errors.ConfigError
        A bad configuration value (exit code 7 on the command line), naming it.
    traceanalyzer.errors.NoGpuActivity
        A trace alone (no configuration) with neither GPU memory events nor copies (exit 5).

    Example
    -------
    The 70B run of docs/examples (TP8 PP8 DP2, full recompute, 80 GB H100), from the repository root:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> r = ta.memory(config="docs/examples/issue1031-70b.toml", reserve_gib=4)
    >>> r.fit.select("stage", "fits").row(0)
    (0, True)
    >>> round(r.predicted.filter(pl.col("component") == "optimizer_states")["gib"].item(), 2)
    6.38

    With a trace recorded with ``profile_memory=True``, ``r.measured`` holds the peaks and
    ``r.fit`` the largest measured peak beside the predicted total.
    """
    from traceanalyzer.api.loading import _saved, load_analysis
    from traceanalyzer.classify import Analysis
    from traceanalyzer.reconciliation.footprint import memory as footprint
    from traceanalyzer.schema import Trace

    reserve = reserve_gib
    if not isinstance(reserve, (int, float)) or isinstance(reserve, bool) or not 0 <= reserve < float("inf"):
        raise InvalidArgument(f"reserve_gib must be a finite number of GiB, zero or more, got {reserve!r}")
    if source is None and config is None and megatron_args is None:
        raise InvalidArgument("nothing to do: give a trace (source), a run configuration (config) or both")
    saved = _saved(source)
    if saved is not None:  # a saved analysis: its trace (the events it kept, else its files)
        source = load_analysis(saved)
    if isinstance(source, Analysis):
        source = source.trace if source.trace.events.height else [Path(s) for s in source.trace.sources]
    elif source is not None and not isinstance(source, Trace):
        source = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    from traceanalyzer.engine import check_workers

    check_workers(workers)
    cfg = _config(config) if config is not None and megatron_args is None else config
    cache = _cache_arg(cache)
    estimate = None
    if cfg is not None or megatron_args is not None:
        from traceanalyzer.model import RunConfig
        from traceanalyzer.model.loader import load_config
        from traceanalyzer.model.memory import estimate_memory

        if not isinstance(cfg, RunConfig):
            cfg = load_config(cfg, megatron_args)
        estimate = estimate_memory(cfg)  # a configuration the model refuses: said before the trace is read
    memory_events = driver_memory = None
    if source is not None:
        source, memory_events, driver_memory = _memory_inputs(source, cache, workers, quiet)
    return footprint(source, cfg, reserve_gb=reserve, step_range=step_range, gpu_only=gpu_only,
                     memory_events=memory_events, driver_memory=driver_memory, estimate=estimate)


def _memory_inputs(source: Any, cache: bool | Path, workers: int | None, quiet: bool) -> tuple[Any, pl.DataFrame, dict[str, pl.DataFrame]]:
    """What :func:`memory` measures, read: (the loaded trace, its Kineto files' allocator events
    with ``rank``, per Nsight Systems SQLite export its driver's device allocations)."""
    from traceanalyzer.parsers.kineto_memory import MEMORY_SCHEMA, read_memory_events
    from traceanalyzer.parsers.nsys_memory import read_nsys_memory

    mem = None
    if hasattr(source, "events") and hasattr(source, "meta"):
        loaded = source
    elif isinstance(cache, (str, Path)):  # a cache directory of its own: this process
        from traceanalyzer.parsers import load

        loaded = load(source, cache=cache)
    else:
        from traceanalyzer.engine import load as load_job

        paths = [source] if isinstance(source, (str, Path)) else list(source)
        # the rank workers read the allocator events while they parse (one pass per file)
        loaded, mem = load_job([Path(p) for p in paths], workers=workers, quiet=quiet, cache=bool(cache), memory=True)
    frames = []
    if mem is not None:
        frames.append(mem.select(*MEMORY_SCHEMA, "rank"))
    else:
        kineto = loaded.meta.filter(pl.col("format") == "kineto")
        for row in kineto.select("rank", "file", "base_time_ns").iter_rows(named=True):  # one per rank file
            events = read_memory_events(row["file"], row["base_time_ns"] or 0)
            frames.append(events.with_columns(pl.lit(row["rank"], dtype=pl.Int32).alias("rank")))
    events = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema={**MEMORY_SCHEMA, "rank": pl.Int32})
    sqlite_files = loaded.meta.filter(pl.col("format") == "nsys-sqlite").get_column("file").unique().to_list()
    return loaded, events, {f: read_nsys_memory(f) for f in sqlite_files}


@renamed_parameter("analysis", "source", version=RENAMED_IN)
@checked
def whatif(
    config: PathLike | RunConfig,
    sets: list[str] | dict[str, object],
    *,
    source: Source | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    convention: str | None = None,
) -> pl.DataFrame:
    """Predict another layout of a run from its measured (or published) step.

    Parameters
    ----------
    config:
        The run configuration of the anchor run: a TOML file, or a
        :class:`~traceanalyzer.model.RunConfig`.
    sets:
        The change: ``["pp=2", "recompute=selective", "micro_batch=2"]`` (as ``--set``), or the same
        as a dict.
    source:
        The anchor run's trace (a path, a :class:`~traceanalyzer.schema.Trace` or an
        :class:`~traceanalyzer.classify.Analysis`). Without it the anchor is the analytic model
        of ``config``, its compute time implied by ``[reported]`` when given (a published run),
        else at peak.
    baseline:
        nccl-tests output (a file, several, or a frame already read): every communication
        family's bandwidth is read off it at its message size and scope.
    convention:
        FLOPs convention of the TFLOP/s (default: the reported one, else the configuration's).

    Returns
    -------
    polars.DataFrame
        Two rows, ``scenario`` = ``"anchor"`` and ``"predicted"``: the layout (``gpus tp pp vp dp
        cp ep micro_batch global_batch recompute sequence_parallel distributed_optimizer``),
        ``step_time_s``, ``tflops_per_gpu`` (model FLOPs), ``hw_tflops_per_gpu``, ``mfu``,
        ``hfu``, ``memory_gib`` / ``margin_gib`` / ``fits`` (the most loaded stage against the
        GPU's memory less the reserve; null when the memory model cannot size it) and one ``<term>_ms`` column per
        term of the step (compute by family, recompute, imbalance, exposed communication by
        dimension, bubble, other, idle by cause). ``anchor_source`` says what the anchor was:
        ``trace``, ``reported`` or ``analytic``. The rules that moved each term are in
        :func:`project` (``traceanalyzer whatif -f json`` prints them).

    Raises
    ------
    SetUsageError
        (exit 2) a malformed ``KEY=VALUE`` or an unknown key.
    ConfigError
        (exit 7) a bad value or an inconsistent layout, naming the key.

    Example
    -------
    The published 70B run of docs/examples (TP8 PP8 DP2, full recompute, 296.5 TFLOP/s/GPU
    reported) moved to PP4 with selective recompute (run from the repository root): a shorter
    step, at the price of three times the memory, which still fits the 80 GB H100:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> w = ta.whatif("docs/examples/issue1031-70b.toml", ["pp=4", "recompute=selective"])
    >>> w.select("scenario", "anchor_source", "pp", "recompute", pl.col("step_time_s", "tflops_per_gpu", "memory_gib").round(1), "fits").rows()
    [('anchor', 'reported', 8, 'full', 2.9, 296.5, 16.0, True), ('predicted', 'reported', 4, 'selective', 2.0, 431.8, 50.6, True)]
    """
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.reconciliation.anchor import whatif as predict_layout

    if convention is not None:
        _choice("convention", convention, CONVENTIONS)
    anchor = analyze(source) if source is not None else None
    return predict_layout(_config(config), sets, analysis=anchor, baseline=_baseline(baseline), convention=convention)


@checked
def reconcile(
    source: Source,
    config: PathLike | RunConfig | None = None,
    *,
    megatron_args: PathLike | None = None,
    convention: str | None = None,
    hfu: Literal["forward", "megatron", "none"] = "forward",
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    cache: bool | PathLike = False,
    workers: int | None = None,
) -> ReconcileResult:
    """The waterfall from peak to achieved TFLOP/s per GPU: every measured loss beside the theory.

    The same document as ``traceanalyzer reconcile -f json``.

    Parameters:
        source: as in :func:`analyze` (an analysis is given its events with the options it was
            made with).
        config: the run configuration (a TOML file or a :class:`~traceanalyzer.model.RunConfig`).
        megatron_args: Megatron-LM launch arguments, script or training log (with or instead of
            ``config``).
        convention: FLOPs convention (``megatron``, ``megatron2024``, ``palm``; default: the
            configuration's).
        hfu: how recompute counts in HFU (``forward``, ``megatron`` or ``none``).
        baseline: nccl-tests output (file(s) or a frame): predicted communication at the
            bandwidth of its message size and scope.
        step_range: as in :func:`analyze` (ignored for an analysis).
        comm_kernels: as in :func:`analyze`, besides the configuration's ``[trace]`` patterns.
        cache: as in :func:`analyze`.
        workers: as in :func:`analyze`.

    Returns:
        A :class:`~traceanalyzer.results.ReconcileResult` (frozen; ``to_dict()``: the document
        ``traceanalyzer reconcile -f json`` writes): ``schema`` (``traceanalyzer.reconcile``), ``peak_tflops``,
        ``achieved_tflops``, ``terms`` (each loss in TFLOP/s and % of peak, measured beside
        predicted), ``warnings``...; documented in ``docs/report-schema.md``.

    Raises:
        ConfigError: the configuration is missing or invalid.
        InvalidArgument: a bad ``convention``, ``hfu`` or pattern.

    Example:
        >>> import traceanalyzer as ta
        >>> w = ta.reconcile("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
        ...                  "docs/examples/traces/mi300x-resnet18-ckpt.toml")
        >>> w.schema, "exact" in w.to_dict()
        ('traceanalyzer.reconcile', False)
    """
    wf, _warnings = _reconcile(source, config, megatron_args, convention, hfu, baseline, step_range, comm_kernels, cache, workers)
    return ReconcileResult.from_dict({"schema": "traceanalyzer.reconcile", "schema_version": 1, **public(wf)})


def waterfall_of(analysis: Analysis, config: RunConfig, *, convention: str | None = None, hfu: str = "forward",
                 baseline: pl.DataFrame | None = None) -> dict[str, Any]:
    """The waterfall of an analysis (holding its events) against a run configuration, with the
    overlapped communication attached (what ``reconcile`` and ``compare --config`` show)."""
    from traceanalyzer.reconciliation.waterfall import attach_overlapped, waterfall

    step_name = analysis.options.step_name if analysis.options is not None else DEFAULT_STEP
    wf: dict[str, Any] = waterfall(analysis, config, convention=convention, step_name=step_name, hfu=hfu, baseline=baseline)
    attach_overlapped(wf, analysis)
    return wf


def _reconcile(source: Source, config: PathLike | RunConfig | None, megatron_args: PathLike | None, convention: str | None,
               hfu: str, baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None, step_range: str | None,
               comm_kernels: list[str] | None, cache: bool | PathLike, workers: int | None) -> tuple[dict[str, Any], list[str]]:
    from traceanalyzer.model import load_config
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.flops import HFU_CONVENTIONS

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    _choice("hfu", hfu, tuple(HFU_CONVENTIONS))
    cfg = _config(config) if megatron_args is None and config is not None else load_config(config, megatron_args)  # type: ignore[arg-type]
    patterns = list(comm_kernels or [])
    patterns += [p for p in cfg.trace.comm_kernels if p not in patterns]
    a = resolve(source, step_range, tables=("events", "gpu"), comm_kernels=patterns, cache=cache, workers=workers)
    wf = waterfall_of(a, cfg, convention=convention, hfu=hfu, baseline=_baseline(baseline))
    return wf, [*a.warnings, *wf["warnings"]]


@checked
def predict(
    config: PathLike | RunConfig | None = None,
    *,
    megatron_args: PathLike | None = None,
    vs: PathLike | RunConfig | None = None,
    global_batch: int | Iterable[int] | None = None,
    convention: str | None = None,
    hfu: Literal["forward", "megatron", "none"] = "forward",
    kernel_efficiency: float | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
) -> PredictResult:
    """Predict a run from its configuration alone: FLOPs, bubble, recompute, communication, memory.

    The same document as ``traceanalyzer predict -f json``.

    Parameters:
        config: the run configuration (a TOML file or a :class:`~traceanalyzer.model.RunConfig`).
        megatron_args: Megatron-LM launch arguments, script or training log.
        vs: a reference configuration: its ``[reported]`` throughput sets the kernel efficiency,
            and the gap to it is split into causes.
        global_batch: another global batch, or several (a sweep).
        convention: FLOPs convention (default: the configuration's).
        hfu: how recompute counts in HFU.
        kernel_efficiency: fraction of peak reached by compute kernels, in (0, 1].
        baseline: nccl-tests output (file(s) or a frame): bandwidth by message size.

    Returns:
        A :class:`~traceanalyzer.results.PredictResult` (frozen; ``to_dict()``: the document
        ``traceanalyzer predict -f json`` writes): ``schema`` (``traceanalyzer.predict``), ``prediction``, and with a sweep
        ``sweep``, with ``vs`` the reference's prediction and ``comparison``; ``memory`` (the
        memory per GPU by component, or None) and ``warnings``.

    Raises:
        ConfigError: the configuration is missing or invalid.
        InvalidArgument: a bad ``kernel_efficiency``, ``global_batch`` or ``convention``.

    Example:
        >>> import traceanalyzer as ta
        >>> p = ta.predict("docs/examples/megatron-readme-70b.toml")
        >>> p.schema, p.prediction["convention"]
        ('traceanalyzer.predict', 'megatron2024')
    """
    doc, _sections, _warnings = predict_parts(config, megatron_args, vs, global_batch, convention, hfu, kernel_efficiency, baseline)
    return PredictResult.from_dict(doc)


#: microbatches per pipeline shown when the global batch is unknown: the spread of the verdict
SPREAD_MICROBATCHES = (1, 2, 4, 8, 16, 32)


def predict_parts(config: PathLike | RunConfig | None, megatron_args: PathLike | None, vs: PathLike | RunConfig | None,
                  global_batch: int | Iterable[int] | None, convention: str | None, hfu: str, kernel_efficiency: float | None,
                  baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None, *, all_rows: bool = False
                  ) -> tuple[dict[str, Any], list[Any], list[str]]:
    """(the predict document, its sections, its warnings); ``all_rows``: the sections keep the
    terms that are exactly zero."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model import compare_predictions, load_config, predict as predict_run
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.flops import HFU_CONVENTIONS
    from traceanalyzer.model.memory import estimate_memory
    from traceanalyzer.render.memory import estimate_sections
    from traceanalyzer.render.predictions import comparison_sections, prediction_sections, sweep_section

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    _choice("hfu", hfu, tuple(HFU_CONVENTIONS))
    if kernel_efficiency is not None and not (isinstance(kernel_efficiency, (int, float)) and 0 < kernel_efficiency <= 1):
        raise InvalidArgument(f"kernel_efficiency must be a fraction in (0, 1], got {kernel_efficiency!r}")
    gbs = _ints(global_batch)
    if gbs is not None and any(g < 1 for g in gbs):
        raise InvalidArgument(f"global_batch must be positive, got {global_batch!r}")
    cfg = _config(config) if megatron_args is None and config is not None else load_config(config, megatron_args)  # type: ignore[arg-type]
    base = _baseline(baseline)
    warnings: list[str] = []
    ref_pred = None
    if vs is not None:
        ref_pred = predict_run(_config(vs), convention=convention, hfu=hfu)
        convention = ref_pred["convention"]
        if kernel_efficiency is None:
            kernel_efficiency = ref_pred["kernel_efficiency"]
    batches: list[int | None] = [*gbs] if gbs else [None]
    spread = False
    if not gbs and cfg.batch.global_batch is None and cfg.dp is not None:
        # the verdict depends on an unknown: show its spread instead of one number
        unit = cfg.dp * cfg.batch.micro_batch
        batches = [unit * m for m in SPREAD_MICROBATCHES]
        spread = True
        warnings.append(f"the global batch is unknown: the prediction is shown for {len(batches)} global batches "
                        f"({batches[0]}–{batches[-1]}); give [batch] global_batch or `global_batch` for one answer")
    preds = [predict_run(cfg, convention=convention, kernel_efficiency=kernel_efficiency, global_batch=g, hfu=hfu,
                         baseline=base)
             for g in batches]
    sections = prediction_sections(preds[0], all_rows)
    doc: dict[str, Any] = {"schema": "traceanalyzer.predict", "schema_version": 1, "prediction": preds[0]}
    if len(preds) > 1:
        title = (f"Global batch unknown: the spread [{preds[0]['convention']}]" if spread else None)
        sections.append(sweep_section(preds, title))
        doc["sweep"] = preds
        doc["global_batch_known"] = not spread
    if ref_pred is not None:
        sections += prediction_sections(ref_pred, all_rows)
        cmps = [compare_predictions(p, ref_pred) for p in preds]
        for c in cmps:
            sections += comparison_sections(c)
        doc["vs"] = ref_pred
        doc["comparison"] = cmps[0] if len(cmps) == 1 else cmps
    try:  # memory per GPU by component; None (with a warning) when the configuration cannot say
        est = estimate_memory(cfg)
    except ConfigError as exc:
        warnings.append(f"memory per GPU not estimated: {exc.message}")
        doc["memory"] = None
    else:
        doc["memory"] = est.as_dict()
        sections += estimate_sections(est, doc["memory"])
    warnings += [w for p in preds + ([ref_pred] if ref_pred else []) for w in p["warnings"]]
    warnings = list(dict.fromkeys(warnings))
    doc["warnings"] = warnings
    return doc, sections, warnings


@checked
def baseline(
    files: PathLike | Iterable[PathLike] | None = None,
    *,
    topo: PathLike | None = None,
    source: Source | None = None,
    config: PathLike | RunConfig | None = None,
    gpu: str | None = None,
    nvlink_gbps: float | None = None,
    net_gbps: float | None = None,
    collective: str | None = None,
    nranks: int | None = None,
    scope: Literal["intra", "inter"] | None = None,
    step_range: str | None = DEFAULT_STEP,
) -> dict[str, pl.DataFrame]:
    """The cluster's own baseline (nccl-tests, ``nvidia-smi topo -m``) and the trace's collectives against it.

    The tables of ``traceanalyzer baseline``.

    Parameters:
        files: nccl-tests output file(s) (any ``*_perf`` binary; a log may hold several tests).
        topo: ``nvidia-smi topo -m`` output.
        source: a trace (as in :func:`analyze`): each collective's achieved bus bandwidth against
            the baseline (or the hardware table without ``files``).
        config: a run configuration: with ``topo``, its TP groups against the links.
        gpu: the GPU for the link figures when the files do not name it (``"H100 SXM"``).
        nvlink_gbps: the NVLink line rate, GB/s per direction, instead of the table's.
        net_gbps: the NIC bandwidth per GPU, GB/s per direction, instead of the table's.
        collective: the collective of files that do not say.
        nranks: the rank count of files that do not list their ranks.
        scope: ``intra`` or ``inter`` (node), for files that do not list their hosts.
        step_range: as in :func:`analyze` (ignored for an analysis).

    Returns:
        A ``dict`` of frames, those that apply: ``nccl_tests`` (every measured size against the
        link), ``health`` (per test), ``gpus`` and ``links`` (topology), ``tp_groups``,
        ``collectives`` (each instance's achieved bus bandwidth), ``collective_summary`` and
        ``exposed_split`` (the exposed communication: bandwidth below the baseline vs waiting).

    Raises:
        InvalidArgument: none of ``files``, ``topo`` and ``source``, or ``config`` without ``topo``.
        InvalidTrace: a file is not nccl-tests or ``topo`` output.

    Example:
        >>> import traceanalyzer as ta
        >>> b = ta.baseline("fixtures/baselines/all_reduce_perf_h100_2node.txt")
        >>> sorted(b)
        ['health', 'nccl_tests']
    """
    if files is None and topo is None and source is None:
        raise InvalidArgument("give nccl-tests output files, topo and/or a trace (source)")
    if config is not None and topo is None:
        raise InvalidArgument("config flags TP groups against a topology: give topo too")
    if scope is not None:
        _choice("scope", scope, ("intra", "inter"))
    paths = None if files is None else ([files] if isinstance(files, (str, os.PathLike)) else _paths(files, "files"))
    out, base, _topology = _baseline_tables(paths, topo, config, gpu, nvlink_gbps, net_gbps, collective, nranks, scope)
    if source is not None:
        per, summary, split = collective_busbw(analyze(source, step_range), base, gpu)
        out["collectives"], out["collective_summary"], out["exposed_split"] = per, summary, split
    return out


def _baseline_tables(paths: list[Any] | None, topo: PathLike | None, config: PathLike | Any | None, gpu: str | None,
                     nvlink_gbps: float | None, net_gbps: float | None, collective: str | None, nranks: int | None,
                     scope: str | None) -> tuple[dict[str, pl.DataFrame], pl.DataFrame | None, Any]:
    """(the tables of :func:`baseline` from nccl-tests files and a topology, the nccl-tests
    frame, the topology); ``config`` without ``topo``: ConfigError, once the files are read."""
    out: dict[str, pl.DataFrame] = {}
    base = None
    if paths:
        from traceanalyzer.baselines import health_summary, link_health, read_nccl_tests

        base = pl.concat([read_nccl_tests(Path(_path(f, "files")), collective=collective, nranks=nranks, scope=scope) for f in paths])
        out["nccl_tests"] = link_health(base, gpu, nvlink_gbps, net_gbps)
        out["health"] = health_summary(base, gpu, nvlink_gbps, net_gbps)
    t = None
    if topo is not None:
        from traceanalyzer.baselines import read_topology, tp_group_links

        t = read_topology(Path(_path(topo, "topo")))
        out["gpus"], out["links"] = t.devices, t.links
        if config is not None:
            out["tp_groups"] = tp_group_links(t, _config(config).parallel.tp)
    elif config is not None:
        from traceanalyzer.errors import ConfigError

        raise ConfigError("`config` flags TP groups against a topology: give `topo` FILE too")
    return out, base, t


def collective_busbw(analysis: Analysis, baseline: pl.DataFrame | None = None, gpu: str | None = None
                     ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(per instance, summary, exposed split): each collective's achieved bus bandwidth against
    ``baseline`` (an nccl-tests frame; None: the hardware table), for the device ``gpu``
    (default: the trace's)."""
    from traceanalyzer.reconciliation.busbw import achieved_busbw, busbw_summary, exposed_split

    dev = gpu or next(iter(analysis.trace.meta["device_name"].drop_nulls().to_list()), None)
    per = achieved_busbw(cast(pl.DataFrame, analysis.collectives), baseline=baseline, gpu=dev)
    return per, busbw_summary(per), exposed_split(per, cast(pl.DataFrame, analysis.comm))
