"""Regression gate: the latest run of a job against a baseline, on mean step time.

Baselines:

* a run id — that run;
* ``last-good`` — walk the job's successful runs in date order: the first is good; each later
  run is good when its mean step time is within ``max_regression`` of the good run before it.
  The baseline is the last good run before the latest. A regressed run therefore never becomes
  the baseline, so a slowdown keeps failing the gate on the following nights until it is fixed
  (or until someone names a new baseline).

The latest run of a job is the one with the newest date (then run id). If it failed to analyse,
the gate fails too: a night whose trace cannot be read has not shown that it did not regress.

Damaged store files: a damaged ``runs`` file dated on or after the latest run of a job being
checked might *be* that job's latest run, so the gate cannot answer: exit 4 naming the file. An
older one, or a damaged ``ranks`` file (only the explanation reads those), is skipped with a
warning (``Store.warnings``; pass a :class:`Store` to read them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer.store.database import DamagedStoreFile, Store
from traceanalyzer.classify import BUCKETS
from traceanalyzer.errors import ConfigError, InputNotFound

LAST_GOOD = "last-good"


@dataclass
class GateResult:
    job: str
    passed: bool
    message: str
    latest: str | None = None
    baseline: str | None = None
    change: float | None = None  # relative change of mean step time (0.05 = 5 % slower)


def parse_threshold(text: str) -> float:
    """``3%`` or ``3`` -> 0.03."""
    raw = str(text).strip().rstrip("%").strip()
    try:
        value = float(raw) / 100
    except ValueError as exc:
        raise ConfigError(f"`max_regression` {text!r} is not a percentage (e.g. 3%)") from exc
    if not 0 <= value < 10:
        raise ConfigError(f"`max_regression` {text!r} is out of range (0% to 1000%)")
    return value


def _ms(us: float) -> str:
    return f"{us / 1000:.3f} ms" if abs(us) < 10_000 else f"{us / 1000:.1f} ms"


def _last_good(ok: pl.DataFrame, threshold: float) -> dict | None:
    good = None
    for row in ok.iter_rows(named=True):  # one row per run (nights), not per event
        if good is None or row["step_time_us"] <= good["step_time_us"] * (1 + threshold):
            good = row
    return good


def _explain(store: Store, latest: dict, base: dict, change: float, threshold: float) -> str:
    deltas = sorted(((b, (latest[f"{b}_us"] or 0) - (base[f"{b}_us"] or 0)) for b in BUCKETS), key=lambda x: -x[1])
    top, top_delta = deltas[0]
    rel = f" ({top_delta / base[f'{top}_us']:+.0%})" if base[f"{top}_us"] else ""
    others = [f"{b.replace('_', ' ')} {d / 1000:+.3f} ms" for b, d in deltas[1:] if abs(d) >= 0.5]
    ranks = store.read("ranks", [latest["run_id"], base["run_id"]])
    per = ranks.with_columns(
        (pl.col(f"{top}_ns") / pl.col("steps") / 1000).alias("bucket_us")
    ).select("run_id", "rank", "step_time_us", "bucket_us")
    joined = (
        per.filter(pl.col("run_id") == latest["run_id"])
        .join(per.filter(pl.col("run_id") == base["run_id"]), on="rank", suffix="_base")
        .with_columns(
            (pl.col("bucket_us") - pl.col("bucket_us_base")).alias("d_bucket"),
            (pl.col("step_time_us") / pl.col("step_time_us_base") - 1).alias("d_step"),
        )
        .sort("d_bucket", descending=True)
    )
    if joined.height:
        worst = [f"rank {r['rank']} ({r['d_bucket'] / 1000:+.3f} ms, step {r['d_step']:+.1%})" for r in joined.head(3).iter_rows(named=True)]
        spread = (
            f"; it moved on {joined.filter(pl.col('d_bucket') > 0).height} of {joined.height} ranks, most on " + ", ".join(worst)
        )
    else:
        spread = "; no rank appears in both runs, so the ranks cannot be compared"
    return (
        f"Run {latest['run_id']} (job {latest['job']}, {latest['date']}) regressed: mean step time "
        f"{_ms(latest['step_time_us'])} vs {_ms(base['step_time_us'])} for baseline {base['run_id']} "
        f"({base['date']}), {change:+.1%}, above the {threshold:.1%} limit. "
        f"The bucket that moved most is {top.replace('_', ' ')}: {top_delta / 1000:+.3f} ms per step{rel}"
        f"{spread}."
        + (f" Other buckets: {', '.join(others)}." if others else "")
    )


def _refuse_if_damaged_latest(st: Store, runs: pl.DataFrame, jobs: list[str]) -> None:
    """Exit 4 when a damaged runs file could be the latest run of a job being checked."""
    damaged = st.damaged_runs()
    if not damaged:
        return
    latest = runs.filter(pl.col("job").is_in(jobs)).group_by("job").agg(pl.col("date").max())
    for date, path in damaged:
        later = latest.filter(pl.col("date").cast(pl.String) <= date)["job"].sort().to_list() if date else jobs
        if later:
            raise DamagedStoreFile(
                f"damaged store file ({st.damaged[path]}): it may hold the latest run of job {later[0]!r}, so the gate "
                "cannot decide; run `traceanalyzer batch` again to store that run again, or delete the file", path)


def gate_check(store: str | Path | Store, baseline: str = LAST_GOOD, max_regression: float = 0.03, job: str | None = None) -> list[GateResult]:
    """One :class:`GateResult` per job checked (``job``, the baseline run's job, or every job)."""
    st = store if isinstance(store, Store) else Store(store)
    store = st.root
    runs = st.require_runs()
    if baseline != LAST_GOOD:
        named = runs.filter(pl.col("run_id") == baseline)
        if not named.height:
            raise InputNotFound(f"baseline run {baseline!r} is not in the store", store)
        if named.row(0, named=True)["status"] != "ok":
            raise ConfigError(f"baseline run {baseline!r} failed to analyse: it cannot be a baseline")
        if job is not None and named.row(0, named=True)["job"] != job:
            raise ConfigError(f"baseline run {baseline!r} belongs to job {named.row(0, named=True)['job']!r}, not {job!r}")
        job = named.row(0, named=True)["job"]
    jobs = [job] if job is not None else sorted(runs.get_column("job").unique().to_list())
    if job is not None and job not in runs.get_column("job").to_list():
        raise InputNotFound(f"no run of job {job!r} in the store", store)
    _refuse_if_damaged_latest(st, runs, jobs)
    results = []
    for j in jobs:
        mine = runs.filter(pl.col("job") == j).sort("date", "run_id")
        latest = mine.row(-1, named=True)
        if latest["status"] != "ok":
            results.append(GateResult(j, False, f"Run {latest['run_id']} (job {j}, {latest['date']}) failed to analyse, so it "
                                      f"cannot be checked: {latest['error']} (exit code {latest['exit_code']}).",
                                      latest["run_id"]))
            continue
        if baseline == LAST_GOOD:
            earlier = mine.filter((pl.col("status") == "ok") & (pl.col("run_id") != latest["run_id"]))
            earlier = earlier.filter(pl.col("date") <= latest["date"])
            base = _last_good(earlier, max_regression)
        else:
            base = runs.filter(pl.col("run_id") == baseline).row(0, named=True)
        if base is None:
            results.append(GateResult(j, True, f"job {j}: run {latest['run_id']} is the first successful run: no baseline to compare with.", latest["run_id"]))
            continue
        change = latest["step_time_us"] / base["step_time_us"] - 1
        if change > max_regression:
            results.append(GateResult(j, False, _explain(st, latest, base, change, max_regression), latest["run_id"], base["run_id"], change))
        else:
            results.append(GateResult(
                j, True,
                f"job {j}: run {latest['run_id']} mean step time {_ms(latest['step_time_us'])} vs "
                f"{_ms(base['step_time_us'])} for baseline {base['run_id']} ({change:+.1%}, limit {max_regression:.1%}): passed.",
                latest["run_id"], base["run_id"], change,
            ))
    return results
