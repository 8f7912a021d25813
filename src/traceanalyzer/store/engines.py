"""Scheduling a batch: the rank files of all runs as one stream of engine tasks.

Every Kineto rank file of every run is one task (``RankTask``) on the engine
(:func:`traceanalyzer.engine.run_tasks`: a local process pool, this process, or Ray), so a
batch of few large runs uses every core as well as one of many small runs. A run is reduced
(:func:`traceanalyzer.engine.reduce_ranks`) in this process as soon as its last rank arrives,
and its store rows are yielded; results are identical whichever engine computed them. Only the
engine's public surface is used (its internals are protected by an import contract).

The parse cache (``STORE/_cache``) is per rank file; a run counts as a cache hit when every one
of its rank files came from it. A run holding Nsight Systems inputs (several ranks per file) is
analysed whole, in this process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

from traceanalyzer.store.analyse import RunResult, failed_result, run_result
from traceanalyzer.store.discover import RunSpec
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.engine import (  # noqa: F401 - default_workers: batch's API
    ENGINES, Options, RankResult, RankTask, WorkerDied, check_engine, default_workers, kineto_files, reduce_ranks, run_tasks,
)
from traceanalyzer.errors import TraceAnalyzerError

__all__ = ["ENGINES", "execute", "default_workers"]


def _input_key(spec: RunSpec, hashes: list[str] | None):
    from traceanalyzer.cache import cache_key

    return lambda: cache_key([Path(f) for f in spec.files], hashes)


def _reduce(spec: RunSpec, results: list[RankResult], opts: Options) -> tuple:
    """(the run's Analysis, whether all ranks were cache hits) from its ranks' results."""
    return reduce_ranks(results, [Path(f) for f in spec.files], opts)


def _whole(spec: RunSpec, opts: Options):
    from traceanalyzer.engine import analyse

    return lambda: (analyse(list(spec.files), opts, workers=1, quiet=True), False)


def execute(specs: list[RunSpec], cache_dir: str | None, step_range: str, engine: str = "local",
            workers: int | None = None, address: str | None = None) -> Iterator[tuple[RunSpec, RunResult]]:
    """Analyse every run; yields (spec, result) as runs complete."""
    check_engine(engine, address)
    tasks: list[RankTask] = []
    opts_of: dict[int, Options] = {}
    expected: dict[int, int] = {}
    t0 = {}
    for g, spec in enumerate(specs):
        opts = Options(step_name=spec.step_range or step_range, cache=cache_dir is not None)
        opts_of[g] = opts
        t0[g] = time.perf_counter()
        try:
            kin, nsys = kineto_files([Path(f) for f in spec.files])
        except TraceAnalyzerError as exc:
            yield spec, failed_result(spec, exc, step_range, t0=t0[g])
            continue
        if nsys:
            yield spec, run_result(spec, step_range, _whole(spec, opts), _input_key(spec, None), t0[g])
            continue
        source = ", ".join(str(f) for f in kin[:3])
        expected[g] = len(kin)
        tasks += [RankTask(i, str(f), opts, source, group=g, cache_dir=cache_dir, sha256=True) for i, f in enumerate(kin)]
    got: dict[int, list[RankResult]] = {g: [] for g in expected}
    try:
        for res in run_tasks(tasks, engine, workers, address):
            g = res.group
            got[g].append(res)
            if len(got[g]) == expected[g]:
                spec, ranks = specs[g], got.pop(g)
                hashes = [r.sha256 for r in sorted(ranks, key=lambda r: r.index)]
                analyse = lambda s=spec, rs=ranks, g=g: _reduce(s, rs, opts_of[g])  # noqa: E731
                key = _input_key(spec, None if any(h is None for h in hashes) else hashes)
                # a run's seconds: its ranks' time in the workers plus its reduce here
                yield spec, run_result(spec, step_range, analyse, key, time.perf_counter() - sum(r.seconds for r in ranks))
    except WorkerDied as exc:  # the pool is gone: the runs still waiting fail with it
        for g in list(got):
            yield specs[g], failed_result(specs[g], exc, step_range, t0=t0[g])


def analyse_run(spec: RunSpec, cache_dir: str | None, step_range: str = DEFAULT_STEP) -> RunResult:
    """Analyse one run in this process; a failure becomes a ``status='failed'`` row with its
    message and exit code (see :func:`execute` for many runs)."""
    return next(iter(execute([spec], cache_dir, step_range, workers=1)))[1]
