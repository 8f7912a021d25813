"""``on_trace_ready``: ``torch.profiler.tensorboard_trace_handler`` that also analyses each trace.

::

    from traceanalyzer.integrations.torch import on_trace_ready

    handler = on_trace_ready("log/resnet")          # instead of tensorboard_trace_handler("log/resnet")
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=5, warmup=1, active=3),
                                on_trace_ready=handler) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    handler.close()                                   # waits for the analyses still queued

The trace files are named and laid out as ``tensorboard_trace_handler`` names them
(``DIR/<worker_name>.<time_ns>.pt.trace.json[.gz]``, ``worker_name`` = ``<host>_<pid>`` by
default), so TensorBoard and Perfetto read them as before. The training step waits only for the
file write: the analysis runs in one background process (``python -m
traceanalyzer.integrations.worker``, started with the handler), fed through a bounded queue
(``queue_size`` traces; when it is full the next trace waits for a slot rather than being
lost). Nothing here raises into training: a trace that cannot be analysed is one logged warning
(logger ``traceanalyzer.integrations``) and a status row in the store. This module imports
neither torch nor polars: torch is already loaded by whoever calls the handler.
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal

from traceanalyzer.integrations.anomaly import DEFAULT_FINDING_SHARE, DEFAULT_SLOW_FACTOR, DEFAULT_WINDOW, KeepAnomalous

log = logging.getLogger("traceanalyzer.integrations")

STORE_DIR = "traceanalyzer-store"
DEFAULT_QUEUE = 8
POLL_S = 0.05  # how often the handler's thread looks for a new trace
_STOP = object()


def distributed_identity() -> tuple[int, int]:
    """(rank, world size): from ``torch.distributed`` when it is initialised, else the
    ``RANK``/``WORLD_SIZE`` environment variables, else (0, 1)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-initialised process group: fall back to the environment
        pass
    try:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    except ValueError:
        return 0, 1


def default_run_id(job: str) -> str:
    """torchrun's run id (``TORCHELASTIC_RUN_ID``) when it set one, else ``<job>-<UTC time>``
    of this call (ranks launched otherwise should pass one ``run_id`` to all)."""
    rid = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if rid and rid != "none":
        return rid
    return f"{job}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%S')}"


class TraceHandler:
    """What :func:`on_trace_ready` returns: call it with the profiler (``on_trace_ready=``)."""

    def __init__(self, dir: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None,
                 config: str | os.PathLike[str] | None = None, keep: Literal["all", "anomalous"] = "all",
                 worker_name: str | None = None, use_gzip: bool = True, run_id: str | None = None, job: str | None = None,
                 slow_factor: float = DEFAULT_SLOW_FACTOR, window: int = DEFAULT_WINDOW,
                 finding_share: float | None = DEFAULT_FINDING_SHARE, queue_size: int = DEFAULT_QUEUE,
                 step_range: str = "ProfilerStep", report: bool = False,
                 on_result: Callable[[dict[str, Any]], None] | None = None):
        if keep not in ("all", "anomalous"):
            raise ValueError(f"keep must be 'all' or 'anomalous', got {keep!r}")
        KeepAnomalous(slow_factor, window, finding_share)  # the thresholds are checked here, in training's process
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size must be a whole number of traces, at least 1, got {queue_size!r}")
        self.dir = Path(dir)
        self.store = Path(store) if store is not None else self.dir / STORE_DIR
        # resolved once, here: the training step pays for no path lookups
        self._dir_abs, self._store_abs = self.dir.resolve(), str(self.store.resolve())
        self._host = socket.gethostname()
        self.config = str(Path(config).resolve()) if config is not None else None
        self.keep = keep
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.job = job or self.dir.resolve().name or "training"
        self.run_id = run_id or default_run_id(self.job)
        self.date = dt.datetime.now(dt.timezone.utc).date().isoformat()  # one partition for the whole run
        self.step_range = step_range
        self.report = report
        self.on_result = on_result
        self.results: list[dict[str, Any]] = []  # one per trace handed over, in order (the worker's answers)
        self.failures = 0
        self._seen: dict[tuple[str, int], int] = {}
        self._settings = {"keep": keep, "slow_factor": slow_factor, "window": window, "finding_share": finding_share}
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._proc: subprocess.Popen | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._feed, name="traceanalyzer-handler", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # ------------------------------------------------------------------ in training's thread

    def trace_path(self) -> Path:
        """The next trace's file name, as ``tensorboard_trace_handler`` makes it."""
        if not self.worker_name:
            self.worker_name = f"{self._host}_{os.getpid()}"
        name = f"{self.worker_name}.{time.time_ns()}.pt.trace.json"
        return self.dir / (name + ".gz" if self.use_gzip else name)

    def __call__(self, prof: Any) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # as tensorboard_trace_handler: the trace itself cannot be written
            raise RuntimeError(f"Can't create directory: {self.dir}") from exc
        path = self.trace_path()
        prof.export_chrome_trace(str(path))
        path = self._dir_abs / path.name
        try:
            rank, world = distributed_identity()
            step = getattr(prof, "step_num", None)
            job = {
                "trace": str(path), "store": self._store_abs, "job": self.job,
                "run_id": self._cycle_id(step, rank),
                "rank": rank, "world_size": world, "host": self._host,
                "profiler_step": int(step) if step is not None else None, "date": self.date, "config": self.config,
                "step_range": self.step_range, "report": f"{path}.report.html" if self.report else None,
            }
            if self._closed:
                log.warning("%s: the trace handler is closed: the trace is written but not analysed", path)
                return
            self._queue.put(job)  # waits only when queue_size traces are already waiting
        except Exception as exc:  # noqa: BLE001 - never into training
            self._fail(path, f"{type(exc).__name__}: {exc}")

    def _cycle_id(self, step: int | None, rank: int) -> str:
        """The store run of this trace: ``<run_id>/step<N>`` (N: the profiler's step count, the
        same on every rank for the same cycle); a second trace at the same count (the one
        ``prof.stop()`` writes of a cycle still open) gets ``-2``, then ``-3``..."""
        base = f"{self.run_id}/step{int(step):08d}" if step is not None else f"{self.run_id}/trace"
        self._seen[(base, rank)] = n = self._seen.get((base, rank), 0) + 1
        return base if n == 1 else f"{base}-{n}"

    def close(self, timeout: float | None = None) -> None:
        """Wait for the analyses still queued (at most ``timeout`` seconds), then stop the worker.
        Run at interpreter exit too; calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                proc.kill()
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> "TraceHandler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ in the handler's thread

    def _fail(self, path: Any, error: str) -> None:
        self.failures += 1
        error = str(error)
        named = error if str(path) in error else f"{path}: {error}"  # the error names the file, once
        log.warning("traceanalyzer: not analysed (training goes on): %s", named)

    def _start(self) -> subprocess.Popen:
        import traceanalyzer

        env = dict(os.environ)
        root = str(Path(traceanalyzer.__file__).resolve().parents[1])  # the same package as this process's
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        env.setdefault("POLARS_MAX_THREADS", "2")
        proc = subprocess.Popen([sys.executable, "-m", "traceanalyzer.integrations.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        proc.stdin.write(json.dumps(self._settings) + "\n")
        proc.stdin.flush()
        if not json.loads(proc.stdout.readline() or "{}").get("ready"):
            raise RuntimeError(f"the analysis process did not start (exit code {proc.poll()})")
        return proc

    def _feed(self) -> None:
        while True:
            # polled, not waited on: a put() from the training step then wakes no thread (a woken
            # thread can take the core, and the GIL, from the training step on a busy machine)
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                time.sleep(POLL_S)
                continue
            if job is _STOP:
                return
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                self._proc.stdin.write(json.dumps(job) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the analysis process stopped (exit code {self._proc.wait()})")
                answer = json.loads(line)
            except Exception as exc:  # noqa: BLE001 - the worker died: say so; the next trace gets a new one
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                self._store_failure(job, answer["error"])
            summary = answer.get("summary") or {"status": "failed", "error": answer.get("error")}
            summary = {**summary, "trace": job["trace"], "run_id": job["run_id"], "rank": job["rank"],
                       "profiler_step": job["profiler_step"]}
            if not answer.get("ok"):
                self._fail(job["trace"], answer.get("error"))
            elif summary.get("status") != "ok":
                self._fail(job["trace"], f"{summary.get('error')} (a status row is stored)")
            self.results.append(summary)
            if self.on_result is not None:
                try:
                    self.on_result(summary)
                except Exception as exc:  # noqa: BLE001 - a logger's failure is not training's
                    log.warning("traceanalyzer: the result logger failed on %s: %s", job["trace"], exc)


    def _store_failure(self, job: dict[str, Any], error: str) -> None:
        """A new worker stores the status row of the trace whose worker died on it."""
        try:
            self._proc = self._start()
            self._proc.stdin.write(json.dumps({**job, "failure": f"the analysis process died on this trace: {error}"}) + "\n")
            self._proc.stdin.flush()
            self._proc.stdout.readline()
        except Exception as exc:  # noqa: BLE001 - logged with the failure itself
            log.warning("traceanalyzer: %s: its status row could not be stored either: %s", job["trace"], exc)


def on_trace_ready(dir: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None,
                   config: str | os.PathLike[str] | None = None, keep: Literal["all", "anomalous"] = "all",
                   worker_name: str | None = None, use_gzip: bool = True, **options: Any) -> TraceHandler:
    """A ``torch.profiler`` ``on_trace_ready`` handler: writes each trace as
    ``tensorboard_trace_handler(dir, worker_name, use_gzip)`` would, then analyses it in the
    background into the store.

    Parameters:
        dir: the traces' directory (TensorBoard's logdir).
        store: the store directory (default: ``DIR/traceanalyzer-store``).
        config: a run configuration (run.toml) for MFU and the findings' predicted gains.
        keep: ``"all"`` keeps every trace file; ``"anomalous"`` keeps a trace only when one of its
            steps is slower than ``slow_factor`` (1.5) × the median of the last ``window`` (20)
            profiled steps, when a finding costs at least ``finding_share`` (0.5) of the step, or
            when it could not be analysed. Rows are stored for every trace either way.
        worker_name, use_gzip: as ``tensorboard_trace_handler``'s (gzip is on by default here).
        options: ``run_id`` (default: torchrun's run id, else ``<job>-<UTC start time>``),
            ``job`` (default: the directory's name), ``slow_factor``, ``window``,
            ``finding_share``, ``queue_size`` (8), ``step_range`` (``ProfilerStep``), ``report``
            (also write each trace's HTML report beside it) and ``on_result`` (called in the
            handler's thread with each trace's summary).
    """
    return TraceHandler(dir, store=store, config=config, keep=keep, worker_name=worker_name, use_gzip=use_gzip, **options)
