"""Where the rank workers run: this process, a local process pool, or Ray tasks.

* ``local`` — ``concurrent.futures.ProcessPoolExecutor`` with spawned processes (polars is
  multi-threaded and must not be forked), ``workers`` of them (all cores by default), each
  capped to ``cores // workers`` polars threads (``POLARS_MAX_THREADS`` is in the children's
  environment before they import polars), with the allocators' settings of :func:`malloc_env`.
  One rank file per task: at most ``workers`` ranks' events are in memory at once, and results
  (compact tables) stream back as they complete.
  ``workers=1`` or a single file runs in this process (no pool to start).
* ``ray`` — one Ray task per rank file on ``ray.init(address=...)`` (an existing cluster; the
  rank files must be on a filesystem every node mounts) or on a local Ray started here with
  ``workers`` CPUs. The traceanalyzer package is shipped to the workers
  (``runtime_env={"py_modules": [traceanalyzer], "pip": [its dependencies]}``) unless the
  cluster already has it.

Progress: each worker reports the bytes of its file read so far (compressed bytes for a
``.gz``) through a queue; :func:`run_tasks` hands them to ``on_bytes(index, n)``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from traceanalyzer._allocator import jemalloc_conf
from traceanalyzer.engine.rank import RankResult, RankTask, analyse_rank_file, default_workers
from traceanalyzer.errors import ConfigError, TraceAnalyzerError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

ENGINES = ("local", "ray")
#: glibc's malloc in the workers: blocks of 1 MiB and more are mapped and unmapped on their own
#: (the default threshold grows with the blocks freed, after which the 16 MiB chunk buffers of
#: the decoder stay in the heap and fragment it: ~70 MiB more peak RSS on a 200 MB rank file).
#: Ignored by other C libraries; a value the user set is kept.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def malloc_env(threads: int, environ=os.environ) -> dict[str, str]:
    """The allocators' settings for a worker with ``threads`` polars threads, to put in its
    environment (what ``environ`` sets is kept): glibc's of :data:`_MALLOC_ENV`, and polars'
    jemalloc with as many arenas as polars threads (``narenas``; jemalloc's default is four per
    core). An arena keeps the pages freed in it for a while (polars asks 0.5 s) and the main
    thread and each polars thread allocate from their own, so memory freed by one query was not
    reused by the next one that ran on another thread: ~80 MiB less peak RSS on a 200 MB rank
    file with one arena, same CPU. Polars puts its own settings in ``_RJEM_MALLOC_CONF`` when it
    is imported (this process has) and adds the inherited value after them; the arenas (and
    the other settings of :mod:`traceanalyzer._allocator`) are added unless the value names them
    already."""
    env = {k: environ.get(k) or v for k, v in _MALLOC_ENV.items()}
    # the command line gave its own process arenas of its own (``__main__``): the value it was
    # started with is the one to build on
    conf = environ.get("_TRACEANALYZER_RJEM_MALLOC_CONF", environ.get("_RJEM_MALLOC_CONF")) or ""
    env["_RJEM_MALLOC_CONF"] = jemalloc_conf(conf, threads)
    return env


BytesFn = Callable[[int, int], None]  # (file index, bytes read since the last call)


class WorkerDied(TraceAnalyzerError):
    """The process analysing a rank file died (killed, out of memory) before returning a result."""


# ---------------------------------------------------------------------------------------------
# worker side of the local pool

_QUEUE = None


def _init_worker(queue) -> None:
    global _QUEUE
    from traceanalyzer.interrupts import quiet_worker

    quiet_worker()  # Ctrl-C is the coordinator's to handle: it stops the pool
    _QUEUE = queue


def _pool_task(task: RankTask) -> RankResult:
    q = _QUEUE
    if q is None:
        return analyse_rank_file(task)
    q.put(("start", task.index, os.getpid()))
    try:
        return analyse_rank_file(task, progress=lambda n: q.put(("bytes", task.index, n)))
    finally:
        q.put(("end", task.index, 0))


# ---------------------------------------------------------------------------------------------
# engines


def run_inprocess(tasks: list[RankTask], on_bytes: BytesFn | None) -> Iterator[RankResult]:
    for t in tasks:
        yield analyse_rank_file(t, progress=(lambda n, i=t.index: on_bytes(i, n)) if on_bytes else None)


def run_local(tasks: list[RankTask], workers: int, on_bytes: BytesFn | None) -> Iterator[RankResult]:
    if workers <= 1 or len(tasks) <= 1:
        yield from run_inprocess(tasks, on_bytes)
        return
    import multiprocessing  # the process pool loads only when a job uses it
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")
    n = min(workers, len(tasks))
    queue = ctx.SimpleQueue()  # put() writes at once: a worker that dies next has still said so
    started: dict[int, int] = {}  # index -> pid of the worker analysing it
    ended: set[int] = set()

    def listen() -> None:
        while True:
            msg = queue.get()
            if msg is None:
                return
            what, index, value = msg
            if what == "start":
                started[index] = value
            elif what == "end":
                ended.add(index)
            elif on_bytes is not None:
                on_bytes(index, value)

    listener = threading.Thread(target=listen, name="traceanalyzer-progress", daemon=True)
    listener.start()
    threads = str(max(1, default_workers() // n))
    child_env = {"POLARS_MAX_THREADS": threads, **malloc_env(int(threads))}
    saved = {k: os.environ.get(k) for k in child_env}
    os.environ.update(child_env)  # inherited by the spawned children
    by_index = {t.index: t for t in tasks}
    try:
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker, initargs=(queue,)) as pool:
            from traceanalyzer.interrupts import stop_pool, workers_ignore_ctrl_c

            futures: dict = {}
            try:
                with workers_ignore_ctrl_c():  # the pool starts its processes on the first submit
                    for t in tasks:
                        futures[pool.submit(_pool_task, t)] = t
                for fut in as_completed(futures):
                    try:
                        yield fut.result()
                    except TraceAnalyzerError:
                        raise
                    except Exception as exc:
                        from concurrent.futures.process import BrokenProcessPool

                        if not isinstance(exc, BrokenProcessPool):
                            raise
                        time.sleep(0.5)  # let the listener read the dead worker's last messages
                        culprits = _culprits(pool, started, ended) or [futures[fut].index]
                        names = ", ".join(by_index[i].path for i in culprits[:3])
                        raise WorkerDied(
                            f"the worker process analysing this rank file died ({type(exc).__name__}: "
                            "killed, or out of memory?)",
                            names,
                        ) from None
            except BaseException:  # an error, a signal, or the consumer stopped: no worker left running
                for f in futures:
                    f.cancel()
                stop_pool(pool)
                raise
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if _end_listener(queue):
            listener.join(timeout=5)


def _end_listener(queue: Any) -> bool:
    """Tell the progress listener to end (``None`` on the queue); whether it was told. The
    queue's write lock is shared with the workers: one terminated while it wrote a message (a
    pool stopped by an error, a signal or a consumer that stopped early) never released it, and
    ``queue.put`` would wait for it for ever. The lock is taken with a time limit; past it, the
    listener (a daemon thread) is left as it is."""
    lock, writer = getattr(queue, "_wlock", None), getattr(queue, "_writer", None)
    if lock is None or writer is None:  # not the SimpleQueue this module makes
        queue.put(None)
        return True
    if not lock.acquire(timeout=1.0):
        return False
    try:
        from multiprocessing.reduction import ForkingPickler

        writer.send_bytes(ForkingPickler.dumps(None))
    finally:
        lock.release()
    return True


def _culprits(pool: ProcessPoolExecutor, started: dict[int, int], ended: set[int]) -> list[int]:
    """The files whose worker died: started, not ended, in a process that did not exit by the
    pool's own SIGTERM (sent to the others once one died)."""
    running = [i for i in sorted(started) if i not in ended]
    procs = dict(getattr(pool, "_processes", None) or {})
    dead = {pid for pid, p in procs.items() if p.exitcode is not None and p.exitcode != -signal.SIGTERM}
    return [i for i in running if started[i] in dead] or running


def ray_runtime_env() -> dict:
    """What a Ray worker needs: this package (its directory, by path) and its dependencies.

    Only plain values (strings, lists), so that Ray can copy and ship it: Ray's client deep-copies
    the runtime environment (its ``uv run`` hook), and the package's module object cannot be
    copied (``cannot pickle '_Package' object``)."""
    package = Path(__file__).resolve().parents[1]  # traceanalyzer/, this module's grandparent
    return {"py_modules": [str(package)], "pip": ray_pip_requirements()}


class _QuietRayInit(logging.Filter):
    """Drops the line Ray prints on every run ("SIGTERM handler is not set because current thread
    is not the main thread"): the Ray Client's server starts its driver in a thread and streams
    that line back (logger ``ray.util.client.logsclient``, from a background thread, at any time
    during the session); a local ``ray.init`` outside the main thread logs it too. Our own
    handlers stop the command on SIGTERM (:mod:`traceanalyzer.interrupts`): it says nothing to
    the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SIGTERM handler is not set")


_QUIET = _QuietRayInit()
#: the loggers that carry the line: the Ray Client's log stream, and a local ``ray.init``
RAY_QUIET_LOGGERS = ("ray.util.client.logsclient", "ray._private.worker")


def ray_pip_requirements() -> list[str]:
    """The package's own requirements (as installed), for ``runtime_env["pip"]``."""
    try:
        from importlib.metadata import requires

        reqs = [r.split(";")[0].strip() for r in (requires("traceanalyzer") or []) if "extra ==" not in r]
    except Exception:  # noqa: BLE001 - running from a checkout that is not installed
        reqs = []
    return reqs or ["polars>=1.0", "orjson>=3.8", "msgspec>=0.18"]


#: seconds to wait for a TCP connection to a Ray address before giving up (Ray itself retries an
#: unreachable head for minutes)
RAY_CONNECT_TIMEOUT_S = 10.0


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse an address that does not accept a TCP connection, in seconds rather than after
    Ray's own minutes of retries. ``auto`` / ``local`` (Ray finds the cluster itself) are let
    through; ``ray://host:port`` and ``host:port`` are probed."""
    import socket

    if address in ("auto", "local"):
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"`address` {address!r}: expected ray://HOST:PORT, HOST:PORT or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        raise ConfigError(f"cannot reach Ray at {address}: {reason} (is the cluster up, and is this its client port?)") from exc


def ray_session(workers: int | None, address: str | None):
    """``ray.init`` once (local with ``workers`` CPUs, or ``address``); returns (ray, started)."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("`engine` ray needs Ray: pip install 'traceanalyzer[ray]'") from exc
    if ray.is_initialized():
        return ray, False

    kwargs: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    env = ray_runtime_env()
    if address:
        check_ray_address(address)
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = workers or default_workers()
        env.pop("pip")  # a local Ray uses this interpreter, which has them
    for name in RAY_QUIET_LOGGERS:  # for the rest of the process: the client's stream is asynchronous
        logging.getLogger(name).addFilter(_QUIET)  # a filter already there is not added twice
    try:
        with warnings.catch_warnings():  # said once, in our own line (ray_failure)
            warnings.filterwarnings("ignore", message="Ray Client connection timed out")
            ray.init(runtime_env=env, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(ray_failure(address, exc, os.environ)) from exc
    return ray, True


def ray_failure(address: str | None, exc: BaseException, environ) -> str:
    """The one line for a Ray that could not be started or reached. A client whose connection
    times out on a port that answers (the address was probed) is, most often, one a cluster with
    token authentication did not let in: newer Ray releases turn it on by default (Ray 2.60's
    ``ray start`` does where ~/.ray/auth_token exists, which a local ``ray.init`` writes), and
    Ray's client sends the token only with RAY_AUTH_MODE=token set."""
    line = f"cannot start or reach Ray{' at ' + address if address else ''}: {exc}"
    if address and "timeout" in str(exc) and not environ.get("RAY_AUTH_MODE"):
        line += (" (if the cluster uses token authentication, set RAY_AUTH_MODE=token and give the cluster's token "
                 "in RAY_AUTH_TOKEN or ~/.ray/auth_token)")
    return line


def run_ray(tasks: list[RankTask], workers: int | None, address: str | None, on_bytes: BytesFn | None) -> Iterator[RankResult]:
    ray, started = ray_session(workers, address)
    try:
        remote = ray.remote(analyse_rank_file).options(num_cpus=1, max_retries=1)
        pending = {remote.remote(t): t for t in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                t = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except TraceAnalyzerError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the task's worker died
                    raise WorkerDied(f"the Ray task analysing this rank file failed ({type(exc).__name__})", t.path) from None
                if on_bytes is not None:
                    on_bytes(t.index, res.nbytes)
                yield res
    finally:
        if started:
            ray.shutdown()


def run_tasks(tasks: list[RankTask], engine: str = "local", workers: int | None = None, address: str | None = None,
              on_bytes: BytesFn | None = None) -> Iterator[RankResult]:
    """Run :func:`~traceanalyzer.engine.rank.analyse_rank_file` for every task; yields results
    as they complete (any order)."""
    if engine == "local":
        if address:
            raise ConfigError("`address` is for `engine` ray")
        return run_local(tasks, workers or default_workers(), on_bytes)
    if engine == "ray":
        return run_ray(tasks, workers, address, on_bytes)
    raise ConfigError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
