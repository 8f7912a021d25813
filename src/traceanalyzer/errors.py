"""Errors with documented exit codes.

Every error the CLI reports is a :class:`TraceAnalyzerError`: one line naming the file and the
problem, and an exit code from :data:`EXIT_CODES`. Nothing else reaches the user as a traceback.
"""

from __future__ import annotations

import os
from typing import BinaryIO

#: Exit codes of the ``traceanalyzer`` command (also listed in the README).
EXIT_CODES = {
    0: "success (warnings, if any, went to stderr)",
    1: "internal error: a bug in traceanalyzer (please report it with the input)",
    2: "usage error: bad command-line arguments",
    3: "input or output not found, unreadable or unwritable (missing file, empty directory, permission denied, "
    "-o naming an input, a missing output directory, a full disk)",
    4: "invalid input: not a trace, invalid JSON/gzip/SQLite, unsupported format",
    5: "no GPU activity: a valid trace with nothing to analyse (e.g. a CPU-only profile)",
    6: "consistency check failed: a partition invariant violated (the input is named), or with --strict a trace-integrity check",
    7: "invalid run configuration (missing or inconsistent model/parallel settings)",
    8: "regression gate failed (traceanalyzer gate)",
    9: "some runs failed (traceanalyzer batch): the others were stored; the summary names each failure",
    10: "out of memory: the input may be fine, the command needs more memory than it was allowed (the message says how much)",
    130: "interrupted: SIGINT (Ctrl-C); no partial output is left",
    143: "terminated: SIGTERM; no partial output is left",
}


class TraceAnalyzerError(Exception):
    """An error reported as one line, with its exit code (``exit_code``, given in the class
    statement of each subclass: ``class InvalidTrace(TraceAnalyzerError, exit_code=4)``)."""

    exit_code: int = 1

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, path: object | None = None):
        self.path = str(path) if path is not None else None
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)

    def __reduce__(self):  # raised in a worker process, re-raised here with its path
        return (type(self), (self.message, self.path))


class InternalFailure(TraceAnalyzerError, exit_code=1):
    """An unexpected failure (a bug, or a panic in a native library) while analysing one rank
    file in a worker: carried back as that file's error, so that a batch fails that run only."""


class InputNotFound(TraceAnalyzerError, exit_code=3): ...


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` with every way it can fail turned into :class:`InputNotFound` naming
    the file (exit 3): no such file, permission denied, a directory, any other OSError."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputNotFound("no such file", path) from None
    except PermissionError:
        raise InputNotFound("permission denied", path) from None
    except IsADirectoryError:
        raise InputNotFound("is a directory", path) from None
    except OSError as exc:
        raise InputNotFound(f"cannot read: {exc.strerror or exc}", path) from None


class OutputError(TraceAnalyzerError, exit_code=3):
    """An output cannot be written (or would overwrite an input): exit 3, naming the output path."""


class InvalidTrace(TraceAnalyzerError, exit_code=4): ...


class InvalidAnalysisFile(InvalidTrace):
    """A file given as a saved analysis (``.taz``) that is not one, is damaged, or was written
    in a newer format version than this traceanalyzer reads: exit 4, naming the file."""


class NoGpuActivity(TraceAnalyzerError, exit_code=5): ...


class InvariantViolation(TraceAnalyzerError, exit_code=6): ...


class IntegrityFailed(TraceAnalyzerError, exit_code=6):
    """``--strict``: a trace-integrity check failed (the result was printed first); exit 6, as a
    failed consistency check of the trace."""


class ConfigError(TraceAnalyzerError, exit_code=7): ...


class GateFailed(TraceAnalyzerError, exit_code=8): ...


class OutOfMemory(TraceAnalyzerError, exit_code=10):
    """Memory ran out (an allocation failed: the machine's memory, ``ulimit -v``, a job's memory
    limit): not a bad input. The message says how much the input needs where it can be estimated."""


class BadSetting(TraceAnalyzerError, exit_code=2):
    """An environment variable of ours holds a value that does not parse: a usage error."""


class InvalidArgument(TraceAnalyzerError, ValueError, exit_code=2):
    """A Python API call with a bad argument value (an unknown choice, a negative count): the
    API's counterpart of a command-line usage error (exit 2). Also a :class:`ValueError`."""


class RunsFailed(TraceAnalyzerError, exit_code=9):
    """``batch``: at least one run failed; every other run was analysed and stored."""


def few(names, budget: int = 120) -> str:
    """``names`` joined by ", " within about ``budget`` characters: ``a, b, c and 7 more``."""
    names = [str(n) for n in names]
    shown: list[str] = []
    for i, n in enumerate(names):
        rest = len(names) - i - 1
        tail = f" and {rest} more" if rest else ""
        if shown and len(", ".join([*shown, n])) + len(tail) > budget:
            return ", ".join(shown) + f" and {len(names) - len(shown)} more"
        shown.append(n)
    return ", ".join(shown)
