"""What the verbs share: the types of their arguments and the checks that word a bad argument with
its Python name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, TypedDict, Union, cast

import polars as pl

from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.model import RunConfig
    from traceanalyzer.schema import Trace

PathLike = Union[str, "os.PathLike[str]"]
#: what every verb accepts as its trace: a file or directory of rank files (or several), a
#: loaded :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
Source = Union[PathLike, Iterable[PathLike], "Trace", "Analysis"]


class EngineOptions(TypedDict, total=False):
    """How the files of a source are read (the keywords ``**engine_kw`` of a table verb): as in
    :func:`~traceanalyzer.analyze`, and ``engine`` / ``address`` (``"ray"`` and its cluster),
    ``quiet`` (no progress bar)."""

    cache: bool | PathLike
    workers: int | None
    engine: Literal["local", "ray"]
    address: str | None
    quiet: bool


class AnalysisOptions(EngineOptions, total=False):
    """The keywords ``**options`` of a table verb: the classification's (as in
    :func:`~traceanalyzer.analyze`) and how the files are read (:class:`EngineOptions`)."""

    recompute_range: str | None
    comm_kernels: list[str] | None
    bus_bw_gbps: float


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def _path(p: object, arg: str = "source") -> str | os.PathLike[str]:
    if isinstance(p, (str, os.PathLike)):
        return p
    what = "a Trace or an Analysis" if arg == "source" else "a file name"
    raise InvalidArgument(f"{arg}: expected a path, {what}, got {type(p).__name__}")


def _source_arg(value: object, arg: str) -> Source:
    """``value`` of the argument ``arg`` when it can be a source; else InvalidArgument naming ``arg``."""
    from traceanalyzer.results import Analysis
    from traceanalyzer.schema import Trace

    if isinstance(value, (str, os.PathLike, Trace, Analysis)):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, os.PathLike)) for v in value):
        return cast(Source, value)
    raise InvalidArgument(f"{arg}: expected a path, a list of paths, a Trace or an Analysis, got {type(value).__name__}")


def _paths(ps: object, arg: str = "source") -> list[Any]:
    if isinstance(ps, (dict, bytes)) or hasattr(ps, "keys"):  # iterable, but not a list of paths
        what = "a Trace or an Analysis" if arg == "source" else "file names"
        raise InvalidArgument(f"{arg}: expected a path, a list of paths, {what}, got {type(ps).__name__}")
    try:
        items: list[Any] = list(ps)  # type: ignore[call-overload]
    except TypeError:
        what = "a Trace or an Analysis" if arg == "source" else "file names"
        raise InvalidArgument(f"{arg}: expected a path, a list of paths, {what}, got {type(ps).__name__}") from None
    if not items:
        raise InvalidArgument(f"{arg}: no trace files given" if arg in ("source", "path") else f"{arg}: no files given")
    return items


def _cache_arg(cache: bool | PathLike) -> bool | Path:
    if isinstance(cache, bool):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Path(cache)
    raise InvalidArgument(f"cache must be True, False or a directory, got {cache!r}")


def _check_patterns(recompute_range: str | None, comm_kernels: Iterable[str] | None) -> None:
    """InvalidArgument naming the argument for a bad ``recompute_range`` or ``comm_kernels``."""
    _regex("recompute_range", recompute_range)
    if isinstance(comm_kernels, str):
        raise InvalidArgument("comm_kernels is a list of patterns, not one string")
    for p in comm_kernels or ():
        _regex("comm_kernels", p, polars=True)


def _regex(arg: str, pattern: str | None, *, polars: bool = False) -> None:
    """InvalidArgument naming ``arg`` unless ``pattern`` is None or a regex (Python's ``re``, or
    with ``polars`` the dialect polars matches with: no look-around, no back-references)."""
    if pattern is None:
        return
    if not isinstance(pattern, str):
        raise InvalidArgument(f"{arg} must be a regular expression (a string), got {type(pattern).__name__}")
    try:
        if polars:
            pl.Series([""]).str.contains(pattern)
        else:
            import re

            re.compile(pattern)
    except Exception as exc:  # noqa: BLE001 - re.error, or polars' ComputeError
        why = [ln[len("error: "):] for ln in str(exc).splitlines() if ln.startswith("error: ")]
        raise InvalidArgument(f"{arg}={pattern!r} is not a valid regular expression ({why[0] if why else exc})") from None


def _ints(value: int | Iterable[int] | None) -> list[int] | None:
    if value is None:
        return None
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def _device(analysis: Analysis, ranks: list[int] | None) -> str | None:
    meta = analysis.trace.meta
    if ranks:
        meta = meta.filter(pl.col("rank").is_in(ranks))
    names = meta.get_column("device_name").drop_nulls()
    return str(names[0]) if names.len() else None


def _config(config: object) -> RunConfig:
    """A run configuration: a :class:`~traceanalyzer.model.RunConfig` as it is, a path loaded."""
    from traceanalyzer.model import RunConfig, load_config

    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return load_config(Path(config))
    raise InvalidArgument(f"config must be a run configuration file (a path) or a RunConfig, got {type(config).__name__}")


def _baseline(baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None) -> pl.DataFrame | None:
    """nccl-tests output: a frame as it is, file(s) read and stacked."""
    if baseline is None or isinstance(baseline, pl.DataFrame):
        return baseline
    from traceanalyzer.baselines import read_nccl_tests

    files = [baseline] if isinstance(baseline, (str, os.PathLike)) else _paths(baseline, "baseline")
    return pl.concat([read_nccl_tests(Path(_path(f, "baseline"))) for f in files], how="diagonal_relaxed")


def _model_flops_and_peak(config: PathLike | RunConfig, analysis: Analysis) -> tuple[float, float]:
    """(model FLOPs per GPU per step, peak TFLOP/s per GPU) of a run configuration, as
    ``reconcile`` computes them."""
    from traceanalyzer.model import step_flops
    from traceanalyzer.reconciliation.waterfall import _peak

    cfg = _config(config)
    gpus = cfg.num_gpus
    if gpus is None:
        ws = analysis.trace.meta["world_size"].drop_nulls()
        gpus = int(cast(int, ws.max())) if ws.len() else None
    gpus = cfg.need(gpus, "[hardware] num_gpus", "the FLOPs per GPU (the trace does not give a world size either)")
    peak, _gpu, _where = _peak(cfg, analysis.trace, [])
    return step_flops(cfg).model / gpus, peak


def _check_table_args(name: str | None, sort: str, precision: str | None, top: int | None) -> None:
    from traceanalyzer.classify.kernelstats import SORT_KEYS
    from traceanalyzer.classify.roofline import ELEMENT_BYTES

    _regex("name", name)
    _choice("sort", sort, tuple(SORT_KEYS))
    if precision is not None:
        _choice("precision", precision, tuple(ELEMENT_BYTES))
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 1):
        raise InvalidArgument(f"top must be a positive integer, got {top!r}")


def public(d: dict[str, Any]) -> dict[str, Any]:
    """A document without its exact fractions (kept for tests and the sum checks)."""
    return {k: v for k, v in d.items() if k != "exact"}
