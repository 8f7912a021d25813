"""The store of nightly runs: many runs analysed into it, the trend of a metric, the regression gate.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Literal

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import PathLike, _choice, _path, _paths
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument
from traceanalyzer.results import BatchSummary


@checked
def batch(
    roots: PathLike | Iterable[PathLike],
    store: PathLike,
    *,
    force: bool = False,
    engine: Literal["local", "ray"] = "local",
    workers: int | None = None,
    address: str | None = None,
    config: PathLike | None = None,
    step_range: str = DEFAULT_STEP,
    cache: bool | PathLike = True,
) -> BatchSummary:
    """Analyse every run under ``roots`` not yet stored into a Parquet store (``traceanalyzer batch``).

    A run is a directory of rank traces (or one trace file); one already stored on the very same
    inputs is skipped; each run is stored as one transaction, under the store's write lock.

    Parameters:
        roots: directories (searched recursively) or trace files.
        store: the store directory (a Parquet dataset, created if missing).
        force: analyse runs already stored again, replacing their rows.
        engine: ``local`` (processes) or ``ray``.
        workers: rank files analysed in parallel, over all runs.
        address: the Ray cluster (with ``engine="ray"``).
        config: a run configuration for MFU, for runs whose manifest names none.
        step_range: as in :func:`analyze`.
        cache: the parse cache (True: its default directory; a directory; False: none).

    Returns:
        The summary, a :class:`~traceanalyzer.results.BatchSummary` (frozen; ``to_dict()``:
        ``traceanalyzer batch -f json``'s document without its time stamp):
        ``runs``, ``analysed``, ``reanalysed``, ``skipped``, ``failed`` (run, error, exit code),
        ``cache_hits``, ``warnings`` per run and ``ok``.

    Raises:
        InputNotFound: ``config`` does not exist.
        InvalidArgument: a bad ``engine`` or ``workers``.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> s = ta.batch("fixtures/kineto/dlrm-v100-8rank", tempfile.mkdtemp(), cache=False)
        >>> s.analysed, s.ok
        (['dlrm-v100-8rank'], True)
    """
    from traceanalyzer.store import run_batch
    from traceanalyzer.engine import check_workers

    _choice("engine", engine, ("local", "ray"))
    check_workers(workers)
    if config is not None and not isinstance(config, (str, os.PathLike)):
        raise InvalidArgument(f"config: expected the path of a run configuration (each run reads the file), got {type(config).__name__}")
    if config is not None and not Path(config).is_file():
        from traceanalyzer.errors import InputNotFound

        raise InputNotFound("configuration file not found", config)
    items = [roots] if isinstance(roots, (str, os.PathLike)) else _paths(roots, "roots")
    summary = run_batch([Path(_path(r, "roots")) for r in items], Path(_path(store, "store")), force=force, engine=engine, workers=workers,
                        address=address, config=config, step_range=step_range, cache=cache)
    return BatchSummary.from_dict(batch_summary(summary, force))


@checked
def trend(
    store: PathLike,
    *,
    metric: str = "step_time",
    since: str | None = None,
    job: str | None = None,
) -> pl.DataFrame:
    """One metric of the stored runs over time, per job (``traceanalyzer trend``).

    Parameters:
        store: the store directory (``traceanalyzer batch``).
        metric: ``step_time`` (default), ``mfu``, or a bucket's mean time per step (``exposed_comm``...;
            ``traceanalyzer trend --help`` lists them).
        since: only runs on or after this date (``YYYY-MM-DD``).
        job: only this job.

    Returns:
        One row per run: ``date``, ``job``, ``run_id``, ``value`` and ``change`` (relative to the
        job's previous run).

    Raises:
        InvalidArgument: an unknown ``metric``.
        InputNotFound: no store there.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> store = tempfile.mkdtemp()
        >>> _ = ta.batch("fixtures/kineto/dlrm-v100-8rank", store, cache=False)
        >>> ta.trend(store).select("job", "run_id").rows()
        [('dlrm-v100-8rank', 'dlrm-v100-8rank')]
    """
    from traceanalyzer.store.database import Store
    from traceanalyzer.store.trend import METRICS, trend_frame

    _choice("metric", metric, tuple(METRICS))
    if since is not None:
        import datetime as dt

        try:
            dt.date.fromisoformat(since)
        except ValueError:
            raise InvalidArgument(f"since={since!r} is not a date (YYYY-MM-DD)") from None
    return trend_frame(Store(Path(_path(store, "store"))), metric, since, job)


@renamed_parameter("baseline", "reference", version=RENAMED_IN)
@checked
def gate(
    store: PathLike,
    *,
    reference: str = "last-good",
    max_regression: float | str = 0.03,
    job: str | None = None,
) -> pl.DataFrame:
    """Whether the latest run of each job regressed against a reference run on mean step time (``traceanalyzer gate``).

    Parameters:
        store: the store directory (``traceanalyzer batch``).
        reference: the run compared with: ``last-good`` (the latest earlier run that passed) or a
            run id (``baseline`` is the nccl-tests output elsewhere: this was its old name here).
        max_regression: the largest slowdown allowed: a fraction (0.03) or ``"3%"``.
        job: only this job.

    Returns:
        One row per job: ``job``, ``passed``, ``latest``, ``baseline`` (the reference run's id), ``change`` (relative
        change of the mean step time; 0.05 = 5 % slower) and ``message`` (the explanation the
        command prints).

    Raises:
        InvalidArgument: a bad ``max_regression``.
        InputNotFound: no store there.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> with tempfile.TemporaryDirectory() as store:
        ...     _ = ta.batch("fixtures/kineto/dlrm-v100-8rank", store, cache=False)
        ...     ta.gate(store)["passed"].to_list()
        [True]
    """
    from traceanalyzer.store.gate import gate_check, parse_threshold
    from traceanalyzer.store.database import Store

    if isinstance(max_regression, str):
        threshold = parse_threshold(max_regression)
    elif isinstance(max_regression, (int, float)) and not isinstance(max_regression, bool) and 0 <= max_regression < float("inf"):
        threshold = float(max_regression)
    else:
        raise InvalidArgument(f"max_regression must be a non-negative fraction or a percentage, got {max_regression!r}")
    results = gate_check(Store(Path(_path(store, "store"))), reference, threshold, job)
    return pl.DataFrame(
        [(r.job, r.passed, r.latest, r.baseline, r.change, r.message) for r in results],
        schema={"job": pl.String, "passed": pl.Boolean, "latest": pl.String, "baseline": pl.String, "change": pl.Float64,
                "message": pl.String},
        orient="row",
    )


def batch_summary(summary: Any, force: bool) -> dict[str, Any]:
    """A batch's summary as a document (without the store and the time stamp)."""
    return {
        "force": force,
        "runs": len(summary.analysed) + len(summary.skipped) + len(summary.failed),
        "analysed": list(summary.analysed),
        "reanalysed": list(summary.reanalysed),
        "skipped": list(summary.skipped),
        "failed": [{k: f[k] for k in ("run_id", "error", "exit_code", "error_class")} for f in summary.failed],
        "cache_hits": summary.cache_hits,
        "warnings": {k: list(v) for k, v in summary.warnings.items()},
        "ok": not summary.failed,
    }
