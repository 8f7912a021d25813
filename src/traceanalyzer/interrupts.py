"""SIGINT / SIGTERM: stop cleanly, with exit 130 / 143, no partial output and no stray worker.

:func:`catch_signals` (used by ``cli.main``) turns both signals into :class:`Interrupted`, a
``BaseException`` that no ``except Exception`` on the way swallows and that unwinds through
every ``with`` block: an :class:`~traceanalyzer.outputs.Outputs` write in progress discards its
temporary file, a process pool is stopped. Pools of worker processes use :func:`quiet_worker` as
their initializer (a terminal's Ctrl-C reaches the whole process group: the workers leave it to
the parent, which prints one line) and :func:`stop_pool` when anything interrupts them.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The process received SIGINT or SIGTERM; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(signal.Signals(signum).name)


_held = 0  # depth of held_signals() blocks
_pending: list[int] = []
#: signals received inside catch_signals(): the Interrupted raised for one can be swallowed on
#: its way out — by native code that calls back into Python (polars turns it into a TypeError)
#: or by a callback Python cannot propagate from — so the block remembers that it came
_received: list[int] = []


def _raise(signum: int, _frame: object) -> None:
    _received.append(signum)
    if _held:
        _pending.append(signum)
        return
    raise Interrupted(signum)


def check() -> None:
    """Raise :class:`Interrupted` if a signal arrived whose exception may have been swallowed
    on its way (call it before treating an unexpected exception as a failure of the input)."""
    if _received:
        raise Interrupted(_received[0])


@contextmanager
def held_signals() -> Iterator[None]:
    """A few statements that must not be cut in the middle (creating a temporary file and
    recording it, removing it): a signal arriving meanwhile is raised at the end of the block."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


@contextmanager
def catch_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` (main thread only;
    elsewhere, e.g. a test runner's worker thread, the handlers are left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in HANDLED}
    hook = sys.unraisablehook
    swallowed: list[Interrupted] = []

    def unraisable(info) -> None:
        # a signal that arrives while Python runs a callback whose exceptions it cannot
        # propagate (a weakref or import-lock callback, a __del__): the Interrupted raised there
        # would be printed with a traceback and lost; keep it and raise it when the block ends
        if isinstance(info.exc_value, Interrupted):
            swallowed.append(info.exc_value)
        else:
            hook(info)

    excepthook = sys.excepthook

    def printed(kind, value, tb) -> None:
        # native code that calls back into Python (an import from a library's own thread pool
        # or callback) may hand an error it cannot return to PyErr_Print, which shows it with
        # sys.excepthook: an Interrupted raised there would print a traceback; keep it instead
        if isinstance(value, Interrupted):
            swallowed.append(value)
        else:
            excepthook(kind, value, tb)

    sys.unraisablehook = unraisable
    sys.excepthook = printed
    _received.clear()
    try:
        yield
        if swallowed:  # a signal whose Interrupted a callback could not propagate, or was printed
            raise swallowed[0]
    except Interrupted:
        raise
    except BaseException as exc:
        if _received:  # the Interrupted was turned into another exception on its way (native code)
            raise Interrupted(_received[0]) from exc
        raise
    finally:
        _received.clear()
        sys.unraisablehook = hook
        sys.excepthook = excepthook
        for s, h in previous.items():
            signal.signal(s, h)


def ignore_signals() -> None:
    """Ignore further SIGINT / SIGTERM while the process cleans up after the first one."""
    if threading.current_thread() is threading.main_thread():
        for s in HANDLED:
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def workers_ignore_ctrl_c() -> Iterator[None]:
    """Around starting worker processes: they start with SIGINT blocked (a signal mask survives
    fork and exec), so a Ctrl-C during their start-up, before their initializer ignores it,
    cannot print a traceback; CPython's resource tracker starts its helper the same way. This
    process does not lose that Ctrl-C: it is held and raised when the block ends, once the
    processes are started and known to the pool (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with held_signals():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def quiet_worker() -> None:
    """Initializer of pool worker processes: SIGINT is the parent's to handle (it stops the
    pool); SIGTERM keeps its default (terminate at once)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_pool(pool: object, timeout: float = 5.0) -> None:
    """Stop a ``concurrent.futures.ProcessPoolExecutor`` now: cancel what has not started,
    terminate the workers (kill those still alive after ``timeout`` s), reap them, and end the
    pool's manager thread.

    A worker terminated while it writes its result leaves half a message in the result pipe: the
    manager thread then waits in ``recv`` for the rest, for ever (this process holds the pipe's
    write end too, so no end of file comes), and the interpreter's exit, which joins that
    thread, never returns. With every worker gone, this process's write end is closed: the
    thread reads end of file, marks the pool broken and ends."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if manager is not None:
        _quiet_thread(manager)
    try:
        pool.shutdown(wait=False, cancel_futures=True)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a broken pool: terminate below all the same
        pass
    if terminate is not None and not procs:
        terminate()
        return
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(1.0)
    if manager is None or not manager.is_alive():
        return
    manager.join(0.2)  # it usually ends by itself once the workers are gone
    if manager.is_alive() and writer is not None and all(not p.is_alive() for p in procs):
        try:
            writer.close()
        except OSError:  # closed already
            pass
    manager.join(timeout)


def _quiet_thread(thread: threading.Thread) -> None:
    """Errors escaping ``thread`` (a stopped pool's manager thread, which on its way out may
    fail on what the stop already did: ``InvalidStateError`` marking a cancelled future broken,
    ``OSError`` on a closed pipe) are not printed: the pool's work is being discarded and the
    command says so in its one line. Every other thread's still are."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.thread is not thread:
            previous(args)

    threading.excepthook = hook


def reap_helpers() -> None:
    """Before the process exits: stop multiprocessing's resource tracker (started with a pool of
    worker processes) and wait for it. Left alone it outlives this process by a moment, as an
    orphan that only a reaping init collects: where PID 1 does not reap (a container), it stays
    a zombie. Its registered resources are released first (a garbage collection), so that no
    finalizer starts a new tracker afterwards."""
    rt = sys.modules.get("multiprocessing.resource_tracker")
    tracker = getattr(rt, "_resource_tracker", None)
    if tracker is None or getattr(tracker, "_pid", None) is None or not callable(getattr(tracker, "_stop", None)):
        return
    import gc

    # a pool stopped by a signal (shutdown without waiting) leaves its manager thread running a
    # moment, holding the call queue's semaphores; the interpreter joins it only at exit, after
    # this: its semaphores' finalizers would then start a new tracker (leaked-semaphore warnings
    # and an orphan). Join it now, as the exit would.
    _exit_step("concurrent.futures.process", "_python_exit")
    gc.collect()
    # multiprocessing's own exit step, now rather than at the interpreter's exit: it runs the
    # finalizers of the semaphores still alive (unlink, and unregister from the tracker), which
    # would otherwise run after the tracker stopped (leaked-semaphore warnings, tracebacks of
    # unlinks already done, and a new tracker). It runs once: the exit's own call does nothing.
    _exit_step("multiprocessing.util", "_exit_function")
    try:
        tracker._stop()
    except Exception:  # noqa: BLE001 - at exit, best effort: the tracker then ends as before
        pass


def _exit_step(module: str, name: str) -> None:
    """Call ``module.name()`` (a step the interpreter's exit would run) now, where the module is
    loaded; best effort, as everything at exit."""
    step = getattr(sys.modules.get(module), name, None)
    if callable(step):
        try:
            step()
        except Exception:  # noqa: BLE001 - at exit, best effort
            pass
