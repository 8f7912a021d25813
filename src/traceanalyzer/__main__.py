"""``python -m traceanalyzer`` (and the ``traceanalyzer`` console script): signals are handled
from the first moment, before the heavy imports, then the command line runs.

Until ``cli.main`` takes over (and again after it has finished), nothing is being written, so a
SIGINT / SIGTERM ends the process at once with its exit code (130 / 143) and the one line, never
a ``KeyboardInterrupt`` traceback from the middle of an import.
"""

import gc
import os
import signal
import sys


def _exit_now(signum, _frame):
    os.write(2, b"traceanalyzer: interrupted\n")
    os._exit(128 + signum)


#: where the command keeps the ``_RJEM_MALLOC_CONF`` it was started with (empty: none), for the
#: pool workers' own settings (``engine.pool.malloc_env``)
USER_RJEM = "_TRACEANALYZER_RJEM_MALLOC_CONF"


def _arenas() -> None:
    """The allocator's settings of :mod:`traceanalyzer._allocator` in ``_RJEM_MALLOC_CONF``
    (read by polars' allocator when polars is imported, which has not happened yet): one jemalloc
    arena per polars thread in this process, unless the value names some already (a large file
    analysed here peaks ~60 MiB lower at 200 MB of JSON on two cores, same CPU:
    docs/performance.md, "Worker memory"), and large allocations from those arenas."""
    from traceanalyzer._allocator import jemalloc_conf

    conf = os.environ.get("_RJEM_MALLOC_CONF", "")
    os.environ.setdefault(USER_RJEM, conf)
    threads = os.environ.get("POLARS_MAX_THREADS", "")
    try:
        n = int(threads) if threads.strip() else len(os.sched_getaffinity(0))
    except (ValueError, AttributeError):  # not a number (polars reports it), not Linux
        n = 0
    os.environ["_RJEM_MALLOC_CONF"] = jemalloc_conf(conf, n if n >= 1 else None)


def entry() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _exit_now)
    _arenas()
    args = sys.argv[1:]
    if args in (["--version"], ["-V"]):  # without loading the command line's libraries
        from traceanalyzer import __version__
        from traceanalyzer.parsers import decoder

        try:
            sys.stdout.write(f"traceanalyzer {__version__} (Kineto decoder: {decoder.name()})\n")
            sys.stdout.flush()
        except BrokenPipeError:  # a reader that closed the pipe: quietly, as every command
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError as exc:  # a full disk, a closed stdout: one line, exit 3, as every command
            from traceanalyzer.cli import _write_error

            sys.exit(_write_error(exc))
        sys.exit(0)
    # The imports make some 65 000 objects the cyclic GC tracks, nearly all alive as long as the
    # process (modules, functions, classes): the GC, run every 700 allocations, would scan them
    # again and again (20-30 ms of a small trace's breakdown). Off while they are made, then set
    # aside for good (freeze: never scanned again) before the command runs with the GC on.
    gc.disable()
    try:
        import traceanalyzer

        # the command to run (the first word that is not an option): only its module is imported
        traceanalyzer._cli_command = next((a for a in args if not a.startswith("-")), None)
        from traceanalyzer.cli import run
    finally:
        gc.freeze()
        gc.enable()
    run()


if __name__ == "__main__":
    entry()
