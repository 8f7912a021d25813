"""The batch store: a Parquet dataset, hive-partitioned by date (schema in docs/store.md).

Layout::

    STORE/runs/date=2026-11-20/<run>.parquet    one row per run (status ok or failed)
    STORE/ranks/date=2026-11-20/<run>.parquet   one row per (run, rank)
    STORE/steps/date=2026-11-20/<run>.parquet   one row per (run, rank, step)
    STORE/_cache/<sha256>.parquet               parsed traces (traceanalyzer.batch.cache)

Each run owns exactly one file per table, named from its run id, so storing a run again replaces
its rows (never duplicates them) and readers never see half a run: files are written under a
temporary name and renamed. ``date`` lives in the directory name only (hive partitioning), so
polars, DuckDB and pyarrow/pandas all read it as a column. Only the process that runs the batch
writes the tables; workers write only cache entries.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import polars as pl

from traceanalyzer.classify import COMM_DIM_FIELDS, FIELDS, IDLE_FIELDS
from traceanalyzer.errors import InputNotFound

TABLES = ("runs", "ranks", "steps")
CACHE_DIR = "_cache"

RUN_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "job": pl.String,
    "date": pl.Date,  # partition column (in the path, not in the file)
    "status": pl.String,  # "ok" or "failed"
    "error": pl.String,  # failed runs: the one-line error, naming the file
    "exit_code": pl.Int32,  # failed runs: the exit code `breakdown` would give (errors.EXIT_CODES)
    "error_class": pl.String,  # failed runs: InvalidTrace, NoGpuActivity, InputNotFound, ... InternalError
    "path": pl.String,
    "n_files": pl.Int32,
    "input_sha256": pl.String,  # cache key of the run's files (names + contents + tool version)
    "n_ranks": pl.Int32,
    "n_steps": pl.Int32,  # (rank, step) rows
    "world_size": pl.Int32,
    "device_name": pl.String,
    "step_time_us": pl.Float64,  # mean over every (rank, step) of duration_us
    **{f"{f}_us": pl.Float64 for f in FIELDS[1:]},  # means per (rank, step)
    "mfu": pl.Float64,  # model FLOPs utilisation (fraction), with a run config only
    "warnings": pl.List(pl.String),
    "step_range": pl.String,
    "tool_version": pl.String,
    "analysed_at": pl.Datetime("us"),  # UTC
    "seconds": pl.Float64,  # wall time of the analysis (load + classify)
}

RANK_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "job": pl.String,
    "rank": pl.Int32,
    "file": pl.String,
    "device_name": pl.String,
    "steps": pl.Int32,
    **{f"{f}_ns": pl.Int64 for f in FIELDS},  # totals over the rank's steps (exact)
    "step_time_us": pl.Float64,  # duration_ns / steps / 1000
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "job": pl.String,
    "rank": pl.Int32,
    "step": pl.Int64,
    "start_ns": pl.Int64,
    **{f"{f}_ns": pl.Int64 for f in FIELDS},
    # causes: idle by cause (sum = idle), exposed comm by parallelism dimension (sum = exposed_comm)
    **{f"{f}_ns": pl.Int64 for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]},
    "start_us": pl.Float64,
    **{f"{f}_us": pl.Float64 for f in FIELDS},
    **{f"{f}_us": pl.Float64 for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]},
}

SCHEMAS = {"runs": RUN_SCHEMA, "ranks": RANK_SCHEMA, "steps": STEP_SCHEMA}


def file_stem(run_id: str) -> str:
    """A file name for a run id: readable, and distinct for distinct ids."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._") or "run"
    return f"{safe[:80]}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


class Store:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def cache_dir(self) -> Path:
        return self.root / CACHE_DIR

    def _files(self, table: str) -> list[Path]:
        return sorted((self.root / table).glob("date=*/*.parquet"))

    def write_run(self, run: pl.DataFrame, ranks: pl.DataFrame, steps: pl.DataFrame) -> None:
        """Store one run's rows, replacing whatever was stored for its run id (any date)."""
        row = run.row(0, named=True)
        stem = file_stem(row["run_id"])
        date = row["date"].isoformat()
        for table, frame in (("runs", run), ("ranks", ranks), ("steps", steps)):
            for old in (self.root / table).glob(f"date=*/{stem}.parquet"):
                if old.parent.name != f"date={date}":
                    old.unlink()
            target = self.root / table / f"date={date}" / f"{stem}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            frame.drop("date", strict=False).write_parquet(tmp, compression="zstd", statistics=True)
            os.replace(tmp, target)

    def scan(self, table: str) -> pl.LazyFrame:
        """A table as a LazyFrame, ``date`` included (empty frame of the schema if none)."""
        schema = SCHEMAS[table]
        files = self._files(table)
        if not files:
            return pl.DataFrame(schema=schema if "date" in schema else {**schema, "date": pl.Date}).lazy()
        # the schema of this version: files written by an older one get its new columns as nulls
        return pl.scan_parquet(
            self.root / table / "**" / "*.parquet",
            hive_partitioning=True,
            schema={k: v for k, v in schema.items() if k != "date"},
            hive_schema={"date": pl.Date},
            missing_columns="insert",
            extra_columns="ignore",
        )

    def read(self, table: str) -> pl.DataFrame:
        return self.scan(table).collect()

    def runs(self) -> pl.DataFrame:
        return self.read("runs").sort("date", "run_id")

    def require_runs(self) -> pl.DataFrame:
        if not self.root.exists():
            raise InputNotFound("no such store", self.root)
        runs = self.runs()
        if not runs.height:
            raise InputNotFound("the store holds no runs (run `traceanalyzer batch ROOT --store STORE` first)", self.root)
        return runs
