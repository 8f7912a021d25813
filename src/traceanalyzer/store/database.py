"""The batch store: a Parquet dataset, hive-partitioned by date (schema in docs/store.md).

Layout::

    STORE/.lock                                              held by the batch writing the store
    STORE/runs/date=2026-11-20/<run>.parquet                 one row per run: the commit record
    STORE/ranks/date=2026-11-20/<run>.<write id>.parquet     one row per (run, rank)
    STORE/steps/date=2026-11-20/<run>.<write id>.parquet     one row per (run, rank, step)

Transactions. Storing a run writes its ``steps`` and ``ranks`` files under a fresh *write id*,
then its ``runs`` file (whose row names that write id) last: renaming the ``runs`` file into place
is the commit. Readers (:meth:`Store.read`, trend, gate, the next batch's "already stored" check)
only see committed runs and, of ``ranks``/``steps``, only the files of the committed write id.
So a crash at any point leaves either the run's previous version or nothing visible, never half
a run; the files of an uncommitted write are ignored, and removed by the next batch
(:meth:`Store.recover`), which then stores the run again. Every file is written under a
temporary name, flushed to disk and renamed. A store written before write ids existed
(``<run>.parquet`` in every table, no ``write_id``) reads as committed.

Damaged files (empty, cut short, not Parquet) never stop a read that can do without them: they
are skipped and named in :attr:`Store.warnings` (``damaged`` maps each to the reason). Only the
process that runs the batch writes the tables, under an exclusive ``flock`` on ``STORE/.lock``
(:meth:`Store.writer`); a second batch waits for the first.

``TRACEANALYZER_FAULT=store:<point>`` kills the process (SIGKILL) at that point of
:meth:`Store.write_run` (see :data:`FAULT_POINTS`); ``TRACEANALYZER_FAULT=store:step:<k>`` kills
it just before the k-th I/O step the store takes (every mkdir, lock write, file write, fsync,
rename and unlink, counted from 1 in the process), and ``TRACEANALYZER_FAULT_LOG=<file>`` appends
one line per step to that file (number, step, path): the crash tests and
``scripts/crash_store.py`` use them, as SQLite's crash tests do.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import io
import os
import re
import signal
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import polars as pl

from traceanalyzer.classify import COMM_DIM_FIELDS, FIELDS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.errors import InputNotFound, InvalidTrace, OutputError
from traceanalyzer.outputs import replace_atomically
from traceanalyzer.queries import query_engine

TABLES = ("runs", "ranks", "steps")
LOCK = ".lock"

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
    "input_sha256": pl.String,  # input key of the run's files (names + contents + tool version)
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
    "analysed_at": pl.Datetime("us", "UTC"),  # timezone-aware (stores written before read as UTC too)
    "seconds": pl.Float64,  # wall time of the analysis (load + classify)
    "write_id": pl.String,  # the write whose ranks/steps files belong to this row (null: older store)
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

#: what the training-loop handler (traceanalyzer.integrations) adds to a rank's row: its host,
#: the profiler's step count when the trace was written, the findings' top losses, the profiler's
#: own cost where the breakdown estimates it, and whether the trace file was kept
LOOP_RANK_FIELDS: dict[str, pl.DataType] = {
    "host": pl.String,
    "profiler_step": pl.Int64,
    "top_losses": pl.List(pl.Struct({"loss": pl.String, "label": pl.String, "ms_per_step": pl.Float64, "share_of_step": pl.Float64})),
    "profiler_overhead_us": pl.Float64,  # medians over the rank's steps (breakdown -f json's *_median_us)
    "unprofiled_estimate_us": pl.Float64,
    "trace_kept": pl.Boolean,
}
RANK_SCHEMA.update(LOOP_RANK_FIELDS)

STEP_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "job": pl.String,
    "rank": pl.Int32,
    "step": pl.Int64,
    "start_ns": pl.Int64,
    **{f"{f}_ns": pl.Int64 for f in FIELDS},
    # causes: idle by cause (sum = idle), host-bound idle by what the host did (sum =
    # idle_host_bound; null in files written before it was split), exposed comm by parallelism
    # dimension (sum = exposed_comm)
    **{f"{f}_ns": pl.Int64 for f in [*IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS]},
    "start_us": pl.Float64,
    **{f"{f}_us": pl.Float64 for f in FIELDS},
    **{f"{f}_us": pl.Float64 for f in [*IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS]},
    **{f: pl.Float64 for f in ("profiler_host_us", "profiler_overhead_us", "unprofiled_estimate_us")},
}
#: the profiler's own cost per step, as `breakdown -f json` gives it (null where it has no estimate)
PROFILER_STEP_FIELDS = ("profiler_host_us", "profiler_overhead_us", "unprofiled_estimate_us")

SCHEMAS = {"runs": RUN_SCHEMA, "ranks": RANK_SCHEMA, "steps": STEP_SCHEMA}
# ranks and steps files carry their write id too (a column written with the rows), so any reader
# can join them to `runs` on (run_id, write_id); the store's own readers select files instead
_ROW_EXTRA = {"write_id": pl.String}

#: where TRACEANALYZER_FAULT=store:<point> kills a write (in this order)
FAULT_POINTS = ("steps-tmp", "steps", "ranks-tmp", "ranks", "uncommit", "runs-tmp", "commit", "cleanup")
FAULT_ENV = "TRACEANALYZER_FAULT"

_DATE_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_WRITE_ID = re.compile(r"^(?P<stem>.+)\.(?P<wid>w[0-9a-f]{16})\.parquet$")


class DamagedStoreFile(InvalidTrace):
    """A store file that cannot be read, where the question cannot be answered without it (exit 4)."""


def file_stem(run_id: str) -> str:
    """A file name for a run id: readable, and distinct for distinct ids."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._") or "run"
    return f"{safe[:80]}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


def new_write_id() -> str:
    return "w" + uuid.uuid4().hex[:16]


FAULT_LOG_ENV = "TRACEANALYZER_FAULT_LOG"
_io_steps = [0]


def _fault(point: str) -> None:
    if os.environ.get(FAULT_ENV) == f"store:{point}":
        os.kill(os.getpid(), signal.SIGKILL)


def _io(step: str, path: Path | str) -> None:
    """One I/O step of writing the store, about to be taken (see the module's docstring)."""
    fault = os.environ.get(FAULT_ENV)
    log = os.environ.get(FAULT_LOG_ENV)
    if not fault and not log:
        return
    _io_steps[0] += 1
    k = _io_steps[0]
    if log:
        with open(log, "a") as fh:
            fh.write(f"{k} {step} {path}\n")
    if fault == f"store:step:{k}":
        os.kill(os.getpid(), signal.SIGKILL)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


class Store:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        #: damaged store file -> why it could not be read (filled by the reads)
        self.damaged: dict[Path, str] = {}

    # ------------------------------------------------------------------ reading

    @property
    def warnings(self) -> list[str]:
        """One line per damaged file the reads skipped."""
        return [f"{p}: damaged store file ({why}): skipped" for p, why in sorted(self.damaged.items())]

    def _files(self, table: str) -> list[tuple[str, Path]]:
        """(date, path) of every data file of a table (temporary and foreign names excluded)."""
        out = []
        base = self.root / table
        try:
            parts = sorted(base.iterdir()) if base.is_dir() else []
        except OSError as exc:
            raise InputNotFound(f"cannot read the store: {_first_line(exc)}", base) from exc
        for part in parts:
            m = _DATE_DIR.match(part.name)
            if not m or not part.is_dir():
                continue
            for f in sorted(part.glob("*.parquet")):
                if not f.name.startswith("."):
                    out.append((m.group(1), f))
        return out

    def _scan_files(self, table: str, files: list[Path]) -> pl.LazyFrame:
        schema = SCHEMAS[table] if table == "runs" else {**SCHEMAS[table], **_ROW_EXTRA}
        file_schema = {k: v for k, v in schema.items() if k != "date"}
        if not files:
            return pl.DataFrame(schema={**file_schema, "date": pl.Date}).lazy()
        # the schema of this version: files written by an older one get its new columns as nulls
        return pl.scan_parquet(
            files,
            hive_partitioning=True,
            schema=file_schema,
            hive_schema={"date": pl.Date},
            missing_columns="insert",
            extra_columns="ignore",
        )

    def _collect(self, table: str, files: list[Path]) -> pl.DataFrame:
        """Read ``files``; damaged ones are skipped (and recorded in ``damaged``)."""
        try:
            return self._scan_files(table, files).collect(engine=query_engine())
        except FileNotFoundError:
            raise  # a concurrent batch replaced a file: the caller lists again
        except Exception:  # noqa: BLE001 - find the damaged file(s) and read the rest
            pass
        good = []
        for f in files:
            try:
                self._scan_files(table, [f]).collect(engine=query_engine())
            except FileNotFoundError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure to read this file: it is damaged
                if not f.exists():
                    raise FileNotFoundError(f) from exc
                self.damaged[f] = _first_line(exc)
                continue
            good.append(f)
        return self._scan_files(table, good).collect(engine=query_engine())

    def _read_runs(self) -> pl.DataFrame:
        files = [f for _, f in self._files("runs")]
        runs = self._collect("runs", files)
        # at most one runs file per run id exists (a write removes the other dates' first); keep
        # the newest row all the same should a copied-in store hold two
        return runs.sort("analysed_at", nulls_last=False).unique("run_id", keep="last", maintain_order=True)

    def committed(self) -> pl.DataFrame:
        """The committed ``runs`` rows, as they are now (damaged runs files skipped and recorded)."""
        for attempt in range(5):
            try:
                return self._read_runs()
            except FileNotFoundError:  # a batch replaced a runs file meanwhile: list again
                continue
        raise InputNotFound("the store kept changing while it was read (five commits in a row): try again", self.root)

    def _committed_files(self, runs: pl.DataFrame, table: str) -> tuple[list[Path], list[Path]]:
        """(files of ``table`` that belong to the commits of ``runs``, expected files missing)."""
        want = {}
        for r, d, w in runs.select("run_id", "date", "write_id").iter_rows():
            stem = file_stem(r)
            want[(d.isoformat(), stem, w or "")] = self.root / table / f"date={d.isoformat()}" / (f"{stem}.{w}.parquet" if w else f"{stem}.parquet")
        out = []
        for date, f in self._files(table):
            m = _WRITE_ID.match(f.name)
            stem, wid = (m.group("stem"), m.group("wid")) if m else (f.name[: -len(".parquet")], "")
            if want.pop((date, stem, wid), None) is not None:
                out.append(f)
        return out, sorted(want.values())

    def read(self, table: str, run_ids: list[str] | None = None) -> pl.DataFrame:
        """A table's committed rows (of ``run_ids`` only, if given), ``date`` included (an empty
        frame of the schema if none)."""
        for attempt in range(5):
            runs = self.committed()
            if run_ids is not None:
                runs = runs.filter(pl.col("run_id").is_in(run_ids))
            if table == "runs":
                return runs
            files, missing = self._committed_files(runs, table)
            if missing and attempt < 4:
                continue  # a batch committed a newer version between the two listings
            for f in missing:
                self.damaged[f] = "missing: the run's rows in this table are gone"
            try:
                return self._collect(table, files).drop("write_id")
            except FileNotFoundError:
                continue
        raise InputNotFound("the store kept changing while it was read (five commits in a row): try again", self.root)

    def scan(self, table: str) -> pl.LazyFrame:
        """What :meth:`read` returns, as a LazyFrame."""
        return self.read(table).lazy()

    def runs(self) -> pl.DataFrame:
        return self.read("runs").sort("date", "run_id")

    def require_runs(self) -> pl.DataFrame:
        """The committed runs; an error when there is no store, or nothing readable in it."""
        if not self.root.exists():
            raise InputNotFound("no such store", self.root)
        runs = self.runs()
        if not runs.height:
            if self.damaged:
                first = min(self.damaged)
                more = f" (and {len(self.damaged) - 1} more damaged file(s))" if len(self.damaged) > 1 else ""
                raise DamagedStoreFile(
                    f"damaged store file ({self.damaged[first]}): no run in the store can be read{more}; "
                    "run `traceanalyzer batch` again to re-store the runs, or delete the file", first)
            raise InputNotFound("the store holds no runs (run `traceanalyzer batch ROOT --store STORE` first)", self.root)
        return runs

    def damaged_runs(self) -> list[tuple[str, Path]]:
        """(date, path) of the ``runs`` files that could not be read."""
        self.committed()
        out = []
        for p in self.damaged:
            if p.parent.parent.name == "runs":
                m = _DATE_DIR.match(p.parent.name)
                out.append((m.group(1) if m else "", p))
        return sorted(out)

    # ------------------------------------------------------------------ writing

    @contextmanager
    def writer(self, on_wait: Callable[[str], None] | None = None) -> Iterator["Store"]:
        """Hold the store's write lock (``flock`` on ``STORE/.lock``) for a batch: a second
        batch on the same store waits here until the first is done (``on_wait`` is told once)."""
        try:
            import fcntl  # POSIX only: imported here, so that reading a store works everywhere
        except ImportError:
            raise OutputError("cannot lock the store for writing: this platform has no POSIX file locks (fcntl); "
                              "run batch on Linux or macOS (trend and gate read a store anywhere)", self.root) from None
        try:
            _io("mkdir", self.root)
            self.root.mkdir(parents=True, exist_ok=True)
            _io("open-lock", self.root / LOCK)
            fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputNotFound(f"cannot write the store: {_first_line(exc)}", self.root) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise InputNotFound(f"cannot lock the store: {_first_line(exc)}", self.root / LOCK) from exc
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
                if on_wait:
                    on_wait(f"{self.root}: another batch is writing this store ({holder}); waiting for it to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
            _io("write-lock", self.root / LOCK)
            try:  # who holds the lock, for a batch that waits: a courtesy (a full disk must not stop the batch here)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} since {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}\n".encode(), 0)
            except OSError:
                pass
            yield self
        finally:
            os.close(fd)  # releases the lock

    def _write_file(self, frame: pl.DataFrame, target: Path, point: str) -> None:
        _io("mkdir", target.parent)
        target.parent.mkdir(parents=True, exist_ok=True)

        # serialised in memory, then written by Python: a full disk or a file-size limit is an
        # OSError naming its cause (polars' own writer reports EFBIG as a thrift "transport error")
        buf = io.BytesIO()
        frame.drop("date", strict=False).write_parquet(buf, compression="zstd", statistics=True)
        data = buf.getbuffer()

        def write(tmp: Path) -> None:
            _io("write", tmp)
            with open(tmp, "wb") as fh:
                fh.write(data)
            _io("fsync", tmp)  # replace_atomically flushes the file next

        def before_replace() -> None:
            _fault(f"{point}-tmp")
            _io("rename", target)

        _io("create", target)
        try:
            replace_atomically(target, write, fsync=True, before_replace=before_replace)
        except OSError as exc:
            raise OutputError(f"cannot write the store: {exc.strerror or _first_line(exc)} (nothing of this run was "
                              "committed; the next batch stores it again)", target) from None
        _fault(point)

    def write_run(self, run: pl.DataFrame, ranks: pl.DataFrame, steps: pl.DataFrame) -> None:
        """Store one run's rows, replacing whatever was stored for its run id (any date), as one
        transaction: ``steps``, ``ranks``, then the ``runs`` row as the commit."""
        row = run.row(0, named=True)
        stem = file_stem(row["run_id"])
        date = row["date"].isoformat()
        wid = new_write_id()
        for table, frame in (("steps", steps), ("ranks", ranks)):
            frame = frame.with_columns(pl.lit(wid, dtype=pl.String).alias("write_id"))
            self._write_file(frame, self.root / table / f"date={date}" / f"{stem}.{wid}.parquet", table)
        # a run whose date changed: withdraw the old commit first (a crash now leaves the run
        # unstored, to be stored again by the next batch; never twice)
        for old in (self.root / "runs").glob(f"date=*/{stem}.parquet"):
            if old.parent.name != f"date={date}":
                _io("unlink", old)
                old.unlink()
        _fault("uncommit")
        target = self.root / "runs" / f"date={date}" / f"{stem}.parquet"
        self._write_file(run.with_columns(pl.lit(wid, dtype=pl.String).alias("write_id")), target, "runs")
        _io("fsync-dir", target.parent)
        _fsync_dir(target.parent)
        _fault("commit")
        self.damaged.pop(target, None)
        for table in ("ranks", "steps"):  # the previous version's files
            for old in (self.root / table).glob(f"date=*/{stem}*.parquet"):
                if _owner(old) == stem and old.name != f"{stem}.{wid}.parquet":
                    _io("unlink", old)
                    old.unlink(missing_ok=True)
                    _fault("cleanup")

    def recover(self) -> list[Path]:
        """Remove what interrupted writes left (temporary files; ``ranks``/``steps`` files of a
        write that never committed), keeping the files of runs whose ``runs`` file is damaged.
        Call with the write lock held. Returns the removed files."""
        self.damaged.clear()
        runs = self.committed()
        keep = {
            (d.isoformat(), file_stem(r), w or "")
            for r, d, w in runs.select("run_id", "date", "write_id").iter_rows()
        }
        damaged = {p.name[: -len(".parquet")] for _, p in self.damaged_runs()}
        removed = []
        for table in TABLES:
            base = self.root / table
            if not base.is_dir():
                continue
            for tmp in base.glob("date=*/.*.tmp"):
                _io("unlink", tmp)
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
            if table == "runs":
                continue
            for date, f in self._files(table):
                m = _WRITE_ID.match(f.name)
                stem, wid = (m.group("stem"), m.group("wid")) if m else (f.name[: -len(".parquet")], "")
                if (date, stem, wid) not in keep and stem not in damaged:
                    _io("unlink", f)
                    f.unlink(missing_ok=True)
                    removed.append(f)
        return removed


def _owner(path: Path) -> str:
    m = _WRITE_ID.match(path.name)
    return m.group("stem") if m else path.name[: -len(".parquet")]
