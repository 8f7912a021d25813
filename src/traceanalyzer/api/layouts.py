"""Layouts and plans: every parallel layout ranked, and the cost of a training run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, TypedDict, Unpack

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import PathLike, Source, _baseline, _choice, _config
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import analyze
from traceanalyzer.errors import InvalidArgument
from traceanalyzer.results import PlanResult

if TYPE_CHECKING:
    from traceanalyzer.model import RunConfig


class PlanOptions(TypedDict, total=False):
    """The keywords ``**options`` of :func:`plan` (those of
    :func:`traceanalyzer.model.runplan.plan_run`)."""

    gpu_power_w: float | None  # watts per GPU, for the energy
    pue: float  # power usage effectiveness of the site (1.0 or more)
    margins: dict[str, tuple[float, float] | float | str] | None  # overrides of the default margins, by name
    measured: dict[str, object] | None  # a traced run's throughput (runplan.measure_trace)
    precision: str | None  # the precision of the GPU's dense peak
    flops: str  # "model" or "hardware" FLOPs


@renamed_parameter("capacity_gb", "capacity_gib", version=RENAMED_IN)
@renamed_parameter("reserve_gb", "reserve_gib", version=RENAMED_IN)
@checked
def search_layouts(
    config: PathLike | RunConfig,
    sets: list[str] | dict[str, object] | None = None,
    *,
    source: Source | None = None,
    top: int = 10,
    capacity_gib: float | None = None,
    reserve_gib: float | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    convention: str | None = None,
) -> pl.DataFrame:
    """Rank every valid layout of a run's model on the same GPUs and global batch by predicted TFLOP/s/GPU.

    The table of ``traceanalyzer whatif --search`` (its JSON document adds the counts).

    Parameters:
        config: the run configuration of the anchor run (a TOML file or a
            :class:`~traceanalyzer.model.RunConfig`).
        sets: changes (``["micro_batch=2"]``, as in :func:`whatif`): each key also pins that knob.
        source: the anchor run's trace (as in :func:`whatif`); without it the analytic model.
        top: size the memory of layouts in order of predicted TFLOP/s until this many fit (0:
            all); the others keep ``fits`` null.
        capacity_gib: memory of one GPU in GiB (default: ``[hardware] memory_gb``, else the GPU
            table's).
        reserve_gib: memory kept free per GPU in GiB (default 4).
        baseline: nccl-tests output (file(s) or a frame).
        convention: FLOPs convention (default: the reported one, else the configuration's).

    Returns:
        One row per layout: the knobs (``tp pp vp cp ep dp micro_batch recompute
        sequence_parallel distributed_optimizer``), ``microbatches``, ``step_time_s``,
        ``tflops_per_gpu``, ``mfu``, ``bubble_ms``, ``recompute_ms``, ``exposed_comm_ms``,
        ``memory_gib``, ``margin_gib``, ``fits``, ``is_anchor`` and ``rank`` (1 = fastest among
        the layouts that fit). Sorted by ``rank`` then predicted TFLOP/s.

    Raises:
        SetUsageError: a malformed ``KEY=VALUE`` or an unknown key.
        ConfigError: a bad value or an inconsistent layout.
        InvalidArgument: a bad ``top``, ``capacity_gib``, ``reserve_gib`` or ``convention``.

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> s = ta.search_layouts("docs/examples/issue1031-70b.toml", ["tp=8", "pp=2"], top=3)
        >>> s.height
        960
        >>> s.head(2).select("rank", "tp", "pp", "vp", "dp", "micro_batch", "recompute", pl.col("tflops_per_gpu", "memory_gib").round(1), "fits").rows()
        [(1, 8, 2, 8, 8, 1, 'none', 529.0, 63.7, True), (2, 8, 2, 5, 8, 1, 'none', 524.1, 64.9, True)]
    """
    if sets is not None and not isinstance(sets, (list, tuple, dict)):  # a whole RunConfig is whatif's, not a search's
        raise InvalidArgument(f"sets: expected a list of KEY=VALUE changes (or a dict), got {type(sets).__name__}")
    found = search_parts(config, None, sets, source, top, capacity_gib, reserve_gib, baseline, convention)
    frame: pl.DataFrame = found["frame"]
    return frame


def search_parts(config: PathLike | RunConfig | None, megatron_args: PathLike | None, sets: list[str] | dict[str, object] | None,
                 source: Source | None, top: int, capacity_gb: float | None, reserve_gb: float | None,
                 baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None, convention: str | None, *,
                 anchor: Any = None, warnings: list[str] | None = None) -> dict[str, Any]:
    """Every layout ranked (``whatif --search``): ``frame`` (all layouts), ``document`` (the
    JSON document, without its warnings), ``title`` and ``notes`` (for the table), ``warnings``."""
    from traceanalyzer.model import load_config
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.search import KNOBS, search_layouts as rank_layouts
    from traceanalyzer.model.whatif import _parse_one, anchor_from_config, apply_sets
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise InvalidArgument(f"top must be a count of layouts (0: all), got {top!r}")
    for arg, v in (("capacity_gb", capacity_gb), ("reserve_gb", reserve_gb)):
        if v is not None and not (isinstance(v, (int, float)) and 0 <= v < float("inf") and (v > 0 or arg == "reserve_gb")):
            raise InvalidArgument(f"{arg} must be a finite {'positive' if arg == 'capacity_gb' else 'non-negative'} number of GiB, got {v!r}")
    cfg = _config(config) if megatron_args is None else load_config(config, megatron_args)  # type: ignore[arg-type]
    if isinstance(sets, str):
        raise InvalidArgument("sets is a list of KEY=VALUE changes (or a dict), not one string")
    new = apply_sets(cfg, sets or [])
    base = _baseline(baseline)
    warnings = list(warnings or [])
    if anchor is None and source is not None:
        anchor = anchor_from_analysis(analyze(source), cfg, convention=convention, baseline=base)
    elif anchor is None:
        anchor = anchor_from_config(cfg, convention=convention, baseline=base)
    keys = {_parse_one(s)[0] for s in sets or []} if not isinstance(sets, dict) else set(sets)
    fixed = {k: _knob_value(new, k) for k in keys if k in KNOBS or k == "dp"}
    df = rank_layouts(anchor, base=new, fixed=fixed, capacity_gib=capacity_gb, reserve_gib=reserve_gb, top=top)
    shown = df if top == 0 else df.head(top)
    notes = [f"anchor: {anchor.description}", f"FLOPs convention: {anchor.convention}"]
    if df["fits"].null_count() == df.height and df.height:
        warnings.append("the memory model cannot size this configuration: no layout was dropped for memory")
    if fixed:
        notes.append("pinned: " + ", ".join(f"{k}={v}" for k, v in fixed.items()))
    bound = anchor.source == "analytic"  # no trace, no [reported] throughput: the peak bounds the layouts
    title = (f"Layouts of {new.num_gpus} GPUs at global batch {new.batch.global_batch}, ranked by "
             + ("an upper bound of TFLOP/s/GPU" if bound else "predicted TFLOP/s/GPU")
             + (" (those that fit in memory)" if df["fits"].null_count() < df.height else ""))
    sized = df.height - df["fits"].null_count()
    doc = {"schema": "traceanalyzer.whatif_search", "schema_version": 1, "anchor": anchor.description, "anchor_source": anchor.source,
           "convention": anchor.convention, "valid_layouts": df.height, "sized_layouts": sized,
           "fitting_layouts": int(df["fits"].sum() or 0), "not_fitting_layouts": sized - int(df["fits"].sum() or 0),
           "pinned": fixed, "layouts": shown.to_dicts()}
    return {"frame": df, "document": doc, "title": title, "notes": notes, "warnings": warnings, "anchor": anchor, "bound": bound}


def _knob_value(cfg: Any, key: str) -> Any:
    p = cfg.parallel
    return {
        "tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp, "ep": p.ep, "dp": cfg.dp, "micro_batch": cfg.batch.micro_batch,
        "recompute": cfg.recompute.granularity, "sequence_parallel": p.sequence_parallel,
        "distributed_optimizer": p.distributed_optimizer,
    }[key]


@checked
def plan(
    tokens: float | str,
    config: PathLike | None = None,
    *,
    params: float | str | None = None,
    gpus: int | None = None,
    gpu: str | None = None,
    mfu: float | str | tuple[float, float] | None = None,
    tflops: float | str | tuple[float, float] | None = None,
    convention: str = "6nt",
    price_per_gpu_hour: float | None = None,
    **options: Unpack[PlanOptions],
) -> PlanResult:
    """Plan a training run: total FLOPs, GPU-hours, wall-clock days, energy and cost, with margins.

    Total FLOPs = FLOPs per token × tokens (``6nt``: 6 × parameters; ``megatron``/``palm``:
    from a run configuration); GPU time = FLOPs / sustained FLOP/s per GPU, then × (1 + margin)
    for each margin (framework overhead, jitter, data loading, interruptions: assumed unless
    measured from a trace). Every figure has a low / expected / high value.

    Parameters:
        tokens: training tokens: a number or ``"15T"``, ``"300B"``.
        config: run configuration (a TOML file or a RunConfig) for the model's FLOPs per token
            and the GPU.
        params: parameter count (``"405B"``) for the ``6nt`` convention.
        gpus: number of GPUs (for wall-clock time).
        gpu: GPU name (``"H100 SXM"``) for its dense peak.
        mfu: model FLOPs utilisation: a fraction, or a range ``"38-43%"``.
        tflops: sustained TFLOP/s per GPU instead of ``mfu``.
        convention: FLOPs convention: ``6nt``, ``megatron``, ``megatron2024``, ``palm``.
        price_per_gpu_hour: price for the cost estimate.
        **options: passed to :func:`traceanalyzer.model.runplan.plan_run` (``gpu_power_w``,
            ``pue``, ``margins``, ``measured``, ``precision``, ``flops``).

    Returns:
        A :class:`~traceanalyzer.results.PlanResult` (frozen; ``to_dict()``: the document
        ``traceanalyzer plan -f json`` writes): ``total_flops``, ``flops_per_token``,
        ``gpu_hours``, ``wall_clock_days``, ``energy_mwh``, ``cost`` (each range-valued figure as
        ``{low, expected, high}``), ``margins`` and ``notes``.

    Raises:
        ConfigError: missing or inconsistent inputs (no throughput, unknown GPU, bad range).

    Example:
        >>> import traceanalyzer as ta
        >>> p = ta.plan("15T", params="405B", mfu="38-43%", gpu="H100 SXM", gpus=16384)
        >>> p.total_flops
        3.645e+25
    """
    from traceanalyzer.model.runplan import plan_run

    cfg = None if config is None else _config(config)
    return PlanResult.from_dict(plan_run(tokens, cfg, params=params, gpus=gpus, gpu=gpu, mfu=mfu, tflops=tflops, convention=convention,
                                         price_per_gpu_hour=price_per_gpu_hour, **options))
