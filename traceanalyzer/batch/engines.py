"""Engines: where the per-run work runs. No scheduling of our own — a process pool or Ray.

* ``local`` — ``concurrent.futures.ProcessPoolExecutor`` (spawned processes: polars is
  multi-threaded and must not be forked) with ``workers`` processes, all cores by default;
  ``workers=1`` runs in this process.
* ``ray`` — one Ray task per run, on ``ray.init(address=...)`` (an existing cluster) or a local
  Ray started here with ``workers`` CPUs. Tasks read traces and write cache entries by path, so on
  a cluster ROOT and STORE must be on a filesystem every node mounts. The traceanalyzer package is
  shipped to the workers (``runtime_env.py_modules``) unless the cluster already has it.

Every engine calls :func:`traceanalyzer.batch.analyse.analyse_run` with the same arguments and
yields its results as they complete; results are identical whichever engine computed them.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Iterator

from traceanalyzer.batch.analyse import RunResult, WorkerDied, analyse_run, failed_result
from traceanalyzer.batch.discover import RunSpec
from traceanalyzer.errors import ConfigError
from traceanalyzer.interrupts import quiet_worker, stop_pool, workers_ignore_ctrl_c

ENGINES = ("local", "ray")


def _worker_died(exc: BaseException) -> WorkerDied:
    return WorkerDied(f"the worker analysing this run died ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_local(specs: list[RunSpec], cache_dir: str | None, step_range: str, workers: int) -> Iterator[tuple[RunSpec, RunResult]]:
    if workers <= 1 or len(specs) <= 1:
        for spec in specs:
            yield spec, analyse_run(spec, cache_dir, step_range)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(specs)), mp_context=ctx, initializer=quiet_worker) as pool:
        try:
            with workers_ignore_ctrl_c():  # the pool starts its processes on the first submit
                futures = {pool.submit(analyse_run, spec, cache_dir, step_range): spec for spec in specs}
            for fut in as_completed(futures):
                spec = futures[fut]
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - the worker died (killed, out of memory): this run fails
                    result = failed_result(spec, _worker_died(exc), step_range)
                yield spec, result
        except BaseException:  # interrupted (signal), or the consumer stopped: no worker left running
            stop_pool(pool)
            raise


def run_ray(specs: list[RunSpec], cache_dir: str | None, step_range: str, workers: int | None, address: str | None) -> Iterator[tuple[RunSpec, RunResult]]:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--engine ray needs Ray: pip install 'traceanalyzer[ray]'") from exc
    import traceanalyzer

    started = False
    if not ray.is_initialized():
        import logging

        kwargs: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        if address:
            kwargs["address"] = address
        elif workers:
            kwargs["num_cpus"] = workers
        try:
            ray.init(runtime_env={"py_modules": [traceanalyzer]}, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot start or reach Ray{' at ' + address if address else ''}: {exc}") from exc
        started = True
    try:
        task = ray.remote(analyse_run).options(num_cpus=1, max_retries=1)
        pending = {task.remote(spec, cache_dir, step_range): spec for spec in specs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                spec = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the task's worker died: this run fails
                    result = failed_result(spec, _worker_died(exc), step_range)
                yield spec, result
    finally:
        if started:
            ray.shutdown()


def execute(specs: list[RunSpec], cache_dir: str | None, step_range: str, engine: str = "local",
            workers: int | None = None, address: str | None = None) -> Iterator[tuple[RunSpec, RunResult]]:
    """Run :func:`analyse_run` for every spec on ``engine``; yields (spec, result) as they finish."""
    if engine == "local":
        if address:
            raise ConfigError("--address is for --engine ray")
        return run_local(specs, cache_dir, step_range, workers or default_workers())
    if engine == "ray":
        return run_ray(specs, cache_dir, step_range, workers, address)
    raise ConfigError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
