"""``python -m traceanalyzer`` (and the ``traceanalyzer`` console script): signals are handled
from the first moment, before the heavy imports, then the command line runs.

Until ``cli.main`` takes over (and again after it has finished), nothing is being written, so a
SIGINT / SIGTERM ends the process at once with its exit code (130 / 143) and the one line, never
a ``KeyboardInterrupt`` traceback from the middle of an import.
"""

import os
import signal


def _exit_now(signum, _frame):
    os.write(2, b"traceanalyzer: interrupted\n")
    os._exit(128 + signum)


def entry() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _exit_now)
    from traceanalyzer.cli import run

    run()


if __name__ == "__main__":
    entry()
