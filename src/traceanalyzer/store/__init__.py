"""Nightly batch analysis: many runs into one Parquet store, then trends and regression gates.

Public surface:

* :func:`run_batch` — discover runs under roots, analyse the new ones on an engine, store them;
  returns a :class:`BatchSummary`.
* :class:`Store` — the dataset (``runs``, ``ranks``, ``steps`` tables; schema in docs/store.md).
* :func:`trend_frame` — one metric over time per job; :func:`gate_check` — latest run vs baseline.
* the parse cache is :mod:`traceanalyzer.cache` (shared with every command that loads traces).

Nothing here prints; the commands in ``traceanalyzer/commands/{batch,trend,gate}.py`` do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
import os
from typing import Callable, Sequence

import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.store.analyse import RunResult, failed_result, load_run_config
from traceanalyzer.store.discover import MANIFEST, RunSpec, discover_runs
from traceanalyzer.store.engines import analyse_run, execute
from traceanalyzer.store.gate import GateResult, gate_check
from traceanalyzer.store.database import Store, file_stem
from traceanalyzer.store.trend import METRICS, trend_frame
from traceanalyzer.cache import cache_key, file_sha256, resolve_dir
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import ConfigError, InputNotFound, TraceAnalyzerError

__all__ = [
    "BatchSummary", "GateResult", "MANIFEST", "METRICS", "RunResult", "RunSpec", "Store",
    "analyse_run", "discover_runs", "gate_check", "run_batch", "trend_frame",
]


@dataclass
class BatchSummary:
    analysed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already stored on the same inputs (force redoes)
    failed: list[dict] = field(default_factory=list)  # run_id, error, exit_code, error_class
    reanalysed: list[str] = field(default_factory=list)  # stored before, input changed since: analysed again
    cache_hits: int = 0
    warnings: dict[str, list[str]] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)  # what was also said through on_notice


def run_batch(
    roots: Sequence[str | Path],
    store: str | Path,
    *,
    force: bool = False,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    config: str | os.PathLike[str] | None = None,
    step_range: str = DEFAULT_STEP,
    cache: bool | str | os.PathLike[str] = True,
    on_plan: Callable[[int], None] | None = None,
    on_done: Callable[[RunSpec, RunResult], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> BatchSummary:
    """Analyse every run under ``roots`` not yet in ``store`` (all of them with ``force``).

    A run is skipped when the store holds it on the very same inputs (trace files and manifest,
    by content); a run whose inputs changed since (a rank that landed later, a trace that was
    still being written) is analysed again and replaces its stored rows, and ``on_notice`` says
    so. Each run is stored as one transaction (see :class:`Store`), under the store's write lock.
    ``cache``: the parse cache (True: its default directory; a directory; False: none).
    """
    summary = BatchSummary()

    def notice(msg: str) -> None:
        summary.notices.append(msg)
        if on_notice:
            on_notice(msg)

    st = Store(store)
    global_config = str(Path(config).resolve()) if config else None
    specs = discover_runs([Path(r) for r in roots], exclude=st.root, config=global_config)
    if global_config:
        load_run_config(global_config)  # a bad or unusable --config stops the batch before any work (exit 7)
    specs = [_check_config(s, global_config) for s in specs]
    cache_dir = str(resolve_dir(None if cache is True else cache)) if cache is not False and cache is not None else None
    digest_dir = cache_dir or str(resolve_dir(None))
    with st.writer(on_wait=notice):
        removed = st.recover()
        if removed:
            notice(f"{st.root}: removed {len(removed)} file(s) left by an interrupted batch (their runs were not committed)")
        stored = {r["run_id"]: r for r in st.committed().iter_rows(named=True)}
        damaged = {p.name[: -len(".parquet")]: p for _, p in st.damaged_runs()}
        for line in st.warnings:
            notice(f"warning: {line}")
        todo: list[tuple[RunSpec, str | None]] = []
        for spec in specs:  # one per run
            key, legacy = _input_keys(spec, digest_dir)
            prev = stored.get(spec.run_id)
            if file_stem(spec.run_id) in damaged and prev is None:
                notice(f"{spec.run_id}: its stored row is damaged ({damaged[file_stem(spec.run_id)]}): storing it again")
                todo.append((spec, key))
            elif force or prev is None:
                todo.append((spec, key))
            elif key is not None and prev["input_sha256"] in _with_version((key, legacy), spec, digest_dir, prev["tool_version"]):
                if spec.error and not (prev["status"] == "failed" and prev["error"] == spec.error):
                    todo.append((spec, key))  # the same files, but the manifest broke: record it
                else:
                    summary.skipped.append(spec.run_id)
            elif prev["status"] == "ok" and len(spec.files) < (prev["n_files"] or 0):
                notice(f"{spec.run_id}: {prev['n_files'] - len(spec.files)} of its {prev['n_files']} trace file(s) are gone "
                       "since it was stored: keeping the stored rows (--force analyses what is left)")
                summary.skipped.append(spec.run_id)
            else:
                if key is None:
                    why = "a trace file cannot be read now"
                elif prev["n_files"] != len(spec.files):
                    why = f"{prev['n_files']} trace file(s) then, {len(spec.files)} now"
                else:
                    why = f"its {len(spec.files)} trace file(s) or manifest hold other bytes"
                notice(f"{spec.run_id}: input changed since it was stored ({why}): analysing it again, "
                       "its stored rows are replaced when done")
                summary.reanalysed.append(spec.run_id)
                todo.append((spec, key))
        if on_plan:
            on_plan(len(todo))
        keys = {spec.run_id: key for spec, key in todo}

        def store_result(spec: RunSpec, result: RunResult) -> None:
            run = result.run.with_columns(pl.lit(keys[spec.run_id], dtype=pl.String).alias("input_sha256"))
            st.write_run(run, result.ranks, result.steps)
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

        for spec, _ in todo:  # runs that cannot be analysed at all: recorded as failed, no worker
            if spec.error:
                store_result(spec, failed_result(spec, _spec_error(spec), step_range))
        runnable = [spec for spec, _ in todo if not spec.error]
        for spec, result in execute(runnable, cache_dir, step_range, engine, workers, address):
            store_result(spec, result)
    summary.analysed.sort()
    summary.failed.sort(key=lambda f: f["run_id"])
    return summary


def _spec_error(spec: RunSpec) -> TraceAnalyzerError:
    cls = {"ConfigError": ConfigError, "InputNotFound": InputNotFound}.get(spec.error_class or "", TraceAnalyzerError)
    return cls(spec.error or "")


def _check_config(spec: RunSpec, global_config: str | None) -> RunSpec:
    """A run whose manifest names an unusable config fails alone (the batch's --config was checked)."""
    if spec.error or not spec.config or spec.config == global_config:
        return spec
    try:
        load_run_config(spec.config)
    except TraceAnalyzerError as exc:
        return replace(spec, error=str(exc), error_class=type(exc).__name__)
    return spec


def _input_keys(spec: RunSpec, digest_dir: str) -> tuple[str | None, str | None]:
    """(input key of the run: trace files and manifest; the key without the manifest, as batches
    before manifests counted stored it), or (None, None) if a file cannot be read."""
    files = [Path(f) for f in spec.files]
    try:
        hashes = [file_sha256(f, digest_dir) for f in files]
        if spec.manifest_path:
            with_manifest = cache_key([*files, Path(spec.manifest_path)], [*hashes, file_sha256(spec.manifest_path, digest_dir)])
            return with_manifest, cache_key(files, hashes)
        key = cache_key(files, hashes)
        return key, key
    except InputNotFound:
        return None, None


def _with_version(keys: tuple[str | None, str | None], spec: RunSpec, digest_dir: str, version: str | None) -> set[str]:
    """The run's input keys as a run stored by traceanalyzer ``version`` would have them."""
    if not version or version == __version__:
        return {k for k in keys if k}
    files = [Path(f) for f in spec.files]
    try:
        hashes = [file_sha256(f, digest_dir) for f in files]
        out = {cache_key(files, hashes, version=version)}
        if spec.manifest_path:
            out.add(cache_key([*files, Path(spec.manifest_path)], [*hashes, file_sha256(spec.manifest_path, digest_dir)], version=version))
        return out
    except InputNotFound:
        return set()
