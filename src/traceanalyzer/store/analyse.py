"""The per-run part of a batch: a run's analysis -> its store rows.

The rank files of every run are analysed by the engine (:mod:`traceanalyzer.engine`, scheduled
in :mod:`traceanalyzer.store.engines`); :func:`run_result` turns a run's analysis into a
:class:`RunResult` (polars frames in the store's schema). It never raises for a bad trace — the
error is part of the result — and never prints.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.store.discover import RunSpec, fallback_date
from traceanalyzer.store.database import LOOP_RANK_FIELDS, PROFILER_STEP_FIELDS, RANK_SCHEMA, RUN_SCHEMA, STEP_SCHEMA
from traceanalyzer.classify import FIELDS
from traceanalyzer.engine import WorkerDied  # noqa: F401 - re-exported: a run's worker died
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import TraceAnalyzerError


@dataclass
class RunResult:
    run: pl.DataFrame  # one row, RUN_SCHEMA
    ranks: pl.DataFrame  # RANK_SCHEMA
    steps: pl.DataFrame  # STEP_SCHEMA
    cache_hit: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def row(self) -> dict:
        return self.run.row(0, named=True)


def _error_row(spec: RunSpec, exc: BaseException) -> dict:
    if isinstance(exc, TraceAnalyzerError):
        return {"error": str(exc), "exit_code": exc.exit_code, "error_class": type(exc).__name__}
    return {"error": f"{type(exc).__name__}: {exc}", "exit_code": 1, "error_class": "InternalError"}


def load_run_config(config_path: str):
    """The run configuration (``run.toml``) MFU needs, via the analytic model package."""
    try:
        from traceanalyzer.model import load_config
    except ImportError as exc:  # the analytic model lives in traceanalyzer.model
        from traceanalyzer.errors import ConfigError

        raise ConfigError("MFU needs the analytic model (traceanalyzer.model), which this build lacks", config_path) from exc
    return load_config(config_path)


def mfu(config_path: str, trace_meta: pl.DataFrame, step_time_s: float) -> float:
    """Model FLOPs utilisation of a run: model FLOPs per step / (step time x GPUs x dense peak)."""
    from traceanalyzer.model import peak_tflops, step_flops, utilization

    cfg = load_run_config(config_path)
    devices = trace_meta.get_column("device_name").drop_nulls()
    gpu = cfg.hardware.gpu or (devices[0] if devices.len() else None)
    peak = peak_tflops(gpu, cfg.hardware.precision, cfg.hardware.peak_tflops)
    world = trace_meta.get_column("world_size").drop_nulls()
    gpus = cfg.hardware.num_gpus or (int(world.max()) if world.len() else trace_meta.height)
    return utilization(step_flops(cfg).model, step_time_s, gpus, peak)


def _base(spec: RunSpec, step_range: str) -> dict:
    return {
        "run_id": spec.run_id,
        "job": spec.job,
        "path": spec.path,
        "n_files": len(spec.files),
        "analysed_at": dt.datetime.now(dt.timezone.utc),
        "tool_version": __version__,
        "step_range": spec.step_range or step_range,
    }


def store_rows(analysis, run_id: str, job: str) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """What the store keeps of an :class:`~traceanalyzer.results.Analysis` (a fresh one or one
    read back from a saved file alike): (its ``steps`` rows, STEP_SCHEMA; its ``ranks`` rows,
    RANK_SCHEMA, the training-loop fields null; the ``runs`` row's fields it gives: the means
    over every (rank, step), ranks, world size, devices, warnings, status ``ok``)."""
    trace = analysis.trace
    steps = analysis.steps
    ident = [pl.lit(run_id).alias("run_id"), pl.lit(job).alias("job")]
    absent = [pl.lit(None, dtype=pl.Float64).alias(f) for f in PROFILER_STEP_FIELDS if f not in steps.columns]
    step_rows = steps.select(*ident, pl.all(), *absent).cast(STEP_SCHEMA).select(list(STEP_SCHEMA))
    meta = trace.meta.select("rank", "file", "device_name")
    rank_rows = (
        analysis.totals()
        .select("rank", "steps", *[f"{f}_ns" for f in FIELDS])
        .join(meta, on="rank", how="left")
        .with_columns(*ident, (pl.col("duration_ns") / pl.col("steps") / 1000).alias("step_time_us"),
                      *[pl.lit(None, dtype=t).alias(c) for c, t in LOOP_RANK_FIELDS.items()])
        .cast(RANK_SCHEMA)
        .select(list(RANK_SCHEMA))
    )
    means = steps.select(
        pl.len().alias("n_steps"),
        pl.col("rank").n_unique().alias("n_ranks"),
        *[pl.col(f"{f}_us").mean().alias("step_time_us" if f == "duration" else f"{f}_us") for f in FIELDS],
    ).row(0, named=True)
    devices = trace.meta.get_column("device_name").drop_nulls().unique().sort()
    world = trace.meta.get_column("world_size").drop_nulls()
    fields = {
        **means,
        "status": "ok",
        "world_size": int(world.max()) if world.len() else None,
        "device_name": ", ".join(devices.to_list()) or None,
        "warnings": list(analysis.warnings),
    }
    return step_rows, rank_rows, fields


def run_result(spec: RunSpec, step_range: str, analyse, input_key, t0: float) -> RunResult:
    """The store rows of one run: ``analyse()`` returns (its Analysis, whether every rank came
    from the parse cache); ``input_key()`` its input key. Never raises: a failure is a row."""
    base = _base(spec, step_range)
    try:
        base["input_sha256"] = input_key()
        analysis, cache_hit = analyse()
        bases = analysis.trace.meta.get_column("base_time_ns").drop_nulls()
        base["date"] = dt.date.fromisoformat(spec.date or fallback_date(int(bases.min()) if bases.len() else None, spec.files))
        step_rows, rank_rows, fields = store_rows(analysis, spec.run_id, spec.job)
        run = {
            **base,
            **fields,
            "mfu": mfu(spec.config, analysis.trace.meta, fields["step_time_us"] / 1e6) if spec.config else None,
        }
        warnings = list(analysis.warnings)
    except Exception as exc:  # noqa: BLE001 - a bad run fails alone, never the batch
        from traceanalyzer.interrupts import check

        check()  # unless it was Ctrl-C turned into another exception by native code: not the run's fault
        return failed_result(spec, exc, step_range, base, t0)
    run["seconds"] = time.perf_counter() - t0
    run_row = pl.DataFrame([run], schema=RUN_SCHEMA)
    return RunResult(run_row, rank_rows, step_rows, cache_hit, run["seconds"], warnings)


def failed_result(spec: RunSpec, exc: BaseException, step_range: str = DEFAULT_STEP, base: dict | None = None,
                  t0: float | None = None) -> RunResult:
    """The result of a run that could not be analysed (also used by engines when a worker dies)."""
    base = base or _base(spec, step_range)
    try:
        date = spec.date or fallback_date(None, spec.files)
    except OSError:
        date = dt.date.today().isoformat()
    run = {**base, **_error_row(spec, exc), "status": "failed", "date": dt.date.fromisoformat(date)}
    run["seconds"] = time.perf_counter() - t0 if t0 is not None else None
    empty = (pl.DataFrame(schema=RANK_SCHEMA), pl.DataFrame(schema=STEP_SCHEMA))
    return RunResult(pl.DataFrame([run], schema=RUN_SCHEMA), *empty, False, run["seconds"] or 0.0, [])
