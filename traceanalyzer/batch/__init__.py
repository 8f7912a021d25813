"""Nightly batch analysis: many runs into one Parquet store, then trends and regression gates.

Public surface:

* :func:`run_batch` — discover runs under roots, analyse the new ones on an engine, store them;
  returns a :class:`BatchSummary`.
* :class:`Store` — the dataset (``runs``, ``ranks``, ``steps`` tables; schema in docs/store.md).
* :func:`trend_frame` — one metric over time per job; :func:`gate_check` — latest run vs baseline.
* :mod:`traceanalyzer.batch.cache` — the content-addressed parse cache (reusable by any command).

Nothing here prints; the commands in ``traceanalyzer/commands/{batch,trend,gate}.py`` do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from traceanalyzer.batch.analyse import RunResult, analyse_run, load_run_config
from traceanalyzer.batch.discover import MANIFEST, RunSpec, discover_runs
from traceanalyzer.batch.engines import execute
from traceanalyzer.batch.gate import GateResult, gate_check
from traceanalyzer.batch.store import Store
from traceanalyzer.batch.trend import METRICS, trend_frame
from traceanalyzer.classify.steps import DEFAULT_STEP

__all__ = [
    "BatchSummary", "GateResult", "MANIFEST", "METRICS", "RunResult", "RunSpec", "Store",
    "analyse_run", "discover_runs", "gate_check", "run_batch", "trend_frame",
]


@dataclass
class BatchSummary:
    analysed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already stored (use force to redo)
    failed: list[dict] = field(default_factory=list)  # run_id, error, exit_code, error_class
    cache_hits: int = 0
    warnings: dict[str, list[str]] = field(default_factory=dict)


def run_batch(
    roots: list[str | Path],
    store: str | Path,
    *,
    force: bool = False,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    config: str | Path | None = None,
    step_range: str = DEFAULT_STEP,
    cache: bool = True,
    on_plan: Callable[[int], None] | None = None,
    on_done: Callable[[RunSpec, RunResult], None] | None = None,
) -> BatchSummary:
    """Analyse every run under ``roots`` not yet in ``store`` (all of them with ``force``).

    A stored run is skipped when it is ``ok``, or ``failed`` on the very same input bytes
    (re-analysing would fail the same way); a failed run whose files changed is retried.
    """
    st = Store(store)
    specs = discover_runs([Path(r) for r in roots], exclude=st.root, config=str(Path(config).resolve()) if config else None)
    for cfg in sorted({s.config for s in specs if s.config}):
        load_run_config(cfg)  # a bad or unusable config stops the batch before any work (exit 7)
    summary = BatchSummary()
    todo = specs
    if not force:
        stored = {r["run_id"]: r for r in st.read("runs").select("run_id", "status", "input_sha256").iter_rows(named=True)}
        todo = []
        for spec in specs:  # one per run
            prev = stored.get(spec.run_id)
            if prev is None:
                todo.append(spec)
            elif prev["status"] == "ok" or _same_inputs(spec, prev["input_sha256"]):
                summary.skipped.append(spec.run_id)
            else:
                todo.append(spec)
    if on_plan:
        on_plan(len(todo))
    cache_dir = str(st.cache_dir) if cache else None
    for spec, result in execute(todo, cache_dir, step_range, engine, workers, address):
        st.write_run(result.run, result.ranks, result.steps)
        row = result.row
        if row["status"] == "ok":
            summary.analysed.append(spec.run_id)
            summary.cache_hits += int(result.cache_hit)
            if result.warnings:
                summary.warnings[spec.run_id] = result.warnings
        else:
            summary.failed.append({k: row[k] for k in ("run_id", "error", "exit_code", "error_class")})
        if on_done:
            on_done(spec, result)
    summary.analysed.sort()
    summary.failed.sort(key=lambda f: f["run_id"])
    return summary


def _same_inputs(spec: RunSpec, stored_key: str | None) -> bool:
    from traceanalyzer.batch.cache import cache_key

    if not stored_key:
        return False
    try:
        return cache_key([Path(f) for f in spec.files]) == stored_key
    except OSError:
        return False
