"""The ``traceanalyzer`` command line: a thin layer over the Python API.

Every failure is one line on stderr and an exit code from ``traceanalyzer.errors.EXIT_CODES``;
set ``TRACEANALYZER_DEBUG=1`` to see the Python traceback of an internal error.
"""

from __future__ import annotations

import errno
import os
import sys

import typer

import traceanalyzer as _ta
from traceanalyzer.commands.common import NoColorOpt, VersionOpt
from traceanalyzer.commands.parsing import Group
from traceanalyzer.errors import EXIT_CODES, TraceAnalyzerError
from traceanalyzer.interrupts import Interrupted, catch_signals, ignore_signals, reap_helpers
from traceanalyzer.outputs import remove_temporaries

_EPILOG = "Exit codes: " + "; ".join(f"{k} {v.split(':')[0]}" for k, v in EXIT_CODES.items()) + "."



class _App(typer.Typer):
    """The app: every command registered on it gets the common options (``-h``, ``-V``,
    ``--no-color``) and readable metavars (:class:`traceanalyzer.commands.parsing.Command`),
    however it is registered."""

    def command(self, *args, **kwargs):
        from traceanalyzer.commands.parsing import Command

        kwargs["cls"] = kwargs.get("cls") or Command
        return super().command(*args, **kwargs)


app = _App(
    name="traceanalyzer",
    cls=Group,
    help="Where did my MFU go? Measured, explained breakdowns of training traces.",
    epilog=_EPILOG,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

#: the modules of traceanalyzer.commands, each named after its command (``-`` as ``_``) or its
#: family's first, in the order of the help, with the commands each registers
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "breakdown": ("breakdown",), "report": ("report",), "kernels": ("kernels", "ops"), "reconcile": ("reconcile", "compare"),
    "predict": ("predict",), "whatif": ("whatif",), "memory": ("memory",), "annotate": ("annotate",), "batch": ("batch",),
    "trend": ("trend",), "gate": ("gate",), "baseline": ("baseline",), "plan": ("plan",), "launches": ("launches",),
    "annotations": ("annotations",), "critical_path": ("critical-path",), "stragglers": ("stragglers",),
}


def _register() -> None:
    """Register the commands. The console script names the one it runs
    (``traceanalyzer._cli_command``, set by ``__main__``): only that command's module is
    imported, so a command loads only the libraries it uses; otherwise (the API, tests, the
    root help, a name we do not know) every command is registered."""
    import importlib

    only = getattr(_ta, "_cli_command", None)
    wanted = [m for m, names in COMMAND_MODULES.items() if only in names] or list(COMMAND_MODULES)
    for m in wanted:
        importlib.import_module(f"traceanalyzer.commands.{m}").register(app)


_register()


@app.callback()
def _root(
    version: VersionOpt = None,
    no_color: NoColorOpt = False,
) -> None:
    """Where did my MFU go? Measured, explained breakdowns of training traces."""
    from traceanalyzer.api.commandline import announce_decoder

    announce_decoder()  # before any worker process starts: they inherit that it was said


def _one_line(text: object) -> str:
    return " ".join(str(text).split("\n")).strip()


def _stdout_closed(fd_at_start: tuple[int, int] | None, exc: BaseException | None = None) -> bool:
    """Whether standard output went away: a reader that closed the pipe (``| head``). Rich and
    click (typer's own copy of it in newer typer) answer a closed pipe by redirecting stdout to
    /dev/null (rich) or wrapping it (click) and exiting 1; we recognise both, an exit caused by
    a broken pipe, and a pipe whose reader is gone. (click is not imported: typer >= 0.29 no
    longer installs it.)"""
    if type(sys.stdout).__name__ == "PacifyFlushWrapper" or _caused_by_broken_pipe(exc):
        return True
    now = _fd_identity()
    if now is not None and now != fd_at_start and now == _devnull_identity():
        return True
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(ev & select.POLLERR for _fd, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _caused_by_broken_pipe(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            return True
        exc, seen = exc.__context__, seen + 1
    return False


def _fd_identity() -> tuple[int, int] | None:
    try:
        st = os.fstat(sys.stdout.fileno())
        return st.st_dev, st.st_ino
    except (OSError, ValueError, AttributeError):
        return None


def _devnull_identity() -> tuple[int, int]:
    st = os.stat(os.devnull)
    return st.st_dev, st.st_ino


def _quiet_stdout() -> int:
    """Point stdout at /dev/null so the final flush cannot fail again (as the Python docs
    recommend for SIGPIPE); a closed pipe is the reader's choice, not an error: exit 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        if isinstance(sys.stdout, _ClosedStream):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the exit
    return 0


def _interrupted(code: int) -> int:
    ignore_signals()
    remove_temporaries()
    print("traceanalyzer: interrupted", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, map every outcome to one line and an exit code.

    SIGINT / SIGTERM: exit 130 / 143 after one "interrupted" line (no partial output is left, see
    :mod:`traceanalyzer.outputs`); a closed stdout pipe: exit 0 quietly; anything unexpected,
    ``BaseException`` included (e.g. a panic in a native library): exit 1 with one line.
    """
    if sys.stdout is None:  # started with standard output closed (``>&-``)
        sys.stdout = _ClosedStream()
    fd_at_start = _fd_identity()
    try:
        with catch_signals():
            try:
                rv = app(args=argv, prog_name="traceanalyzer", standalone_mode=False)
                sys.stdout.flush()
            except Interrupted as exc:
                return _interrupted(exc.exit_code)
        # typer returns the code of a typer.Exit (and 130 for a KeyboardInterrupt it caught)
        code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        return _interrupted(130) if code == 130 else code
    except Interrupted as exc:  # a signal between the handlers and the block
        return _interrupted(exc.exit_code)
    except KeyboardInterrupt:
        return _interrupted(130)
    except TraceAnalyzerError as exc:
        from traceanalyzer.commands.flags import as_flags

        print(f"traceanalyzer: error: {_one_line(as_flags(str(exc)))}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return _interrupted(130)
    except BrokenPipeError:
        return _quiet_stdout()
    except MemoryError:  # an allocation failed: the machine's memory or a limit, not a bad input
        from traceanalyzer.errors import OutOfMemory

        print("traceanalyzer: error: out of memory: give the command more memory (ulimit -v, the job's memory limit) "
              "or fewer --workers", file=sys.stderr)
        return OutOfMemory.exit_code
    except SystemExit as exc:  # rich / click after a closed stdout pipe: sys.exit(1)
        if _stdout_closed(fd_at_start, exc):
            return _quiet_stdout()
        return exc.code if isinstance(exc.code, int) else 1
    except OSError as exc:
        # a file the command reads or writes: not found, permission denied, name too long...
        if exc.filename is not None and exc.errno in _PATH_ERRNOS:
            print(f"traceanalyzer: error: {exc.filename}: {_one_line(exc.strerror or exc)}", file=sys.stderr)
            return 3
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            # standard output or error: a full disk (``> /dev/full``), a closed or read-only descriptor
            return _write_error(exc)
        return _internal(exc)
    except GeneratorExit:  # pragma: no cover - never raised into main
        raise
    except BaseException as exc:  # noqa: BLE001 - a bug, or a panic in a native library (a BaseException)
        # usage errors (typer's, or click's in older typer): one line, exit code 2
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            return _usage_error(exc)
        return _internal(exc)
    finally:
        remove_temporaries()


def _usage_error(exc) -> int:
    """A usage error (bad option or value, missing argument): one line naming the command and
    the option, exit 2. ``traceanalyzer`` alone prints the help (click's NoArgsIsHelpError)."""
    if type(exc).__name__ == "NoArgsIsHelpError" or not callable(getattr(exc, "format_message", None)):
        exc.show()
        return exc.exit_code
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "traceanalyzer"
    message = _one_line(exc.format_message()).replace("Value error, ", "")  # newer typer's wording of a bad choice
    print(f"{where}: usage error: {message} (see {where} --help)", file=sys.stderr)
    return exc.exit_code


#: a write to standard output / error that failed (files named with -o report their own path)
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF, errno.ENXIO}


class _ClosedStream:
    """Standard output when the process started without one (``>&-``): a command that writes
    only files works; a write here is a write error (exit 3), never a silent loss."""

    encoding = "utf-8"

    def write(self, _text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _write_error(exc: OSError) -> int:
    """Standard output (or error) could not be written: one line, exit 3; the unwritten rest
    is dropped so that the exit does not fail on it again."""
    from traceanalyzer.outputs import _why

    why = "it is closed or not open for writing" if exc.errno == errno.EBADF else _why(exc)
    _quiet_stdout()
    try:
        print(f"traceanalyzer: error: cannot write the output to standard output: {why}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # standard error is full (or closed) as well
        _quiet_stream(2, "stderr")
    return 3


def _quiet_stream(fd: int, name: str) -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass
    if getattr(sys, name, None) is None:
        setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - lives until the exit


_PATH_ERRNOS = {
    errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
    errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO,
}


def _internal(exc: BaseException) -> int:
    """A bug: one line (``TRACEANALYZER_DEBUG=1``: the traceback)."""
    if os.environ.get("TRACEANALYZER_DEBUG"):
        raise exc
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    message = _one_line(exc)
    if len(message) > 300:
        message = message[:300] + "..."
    print(
        f"traceanalyzer: internal error: {type(exc).__name__}: {message}{where} "
        "(a bug: please report it with the input; TRACEANALYZER_DEBUG=1 shows the traceback)",
        file=sys.stderr,
    )
    return 1


def run() -> None:
    code = main()
    # the work is done (outputs written, stdout flushed): a signal during interpreter shutdown
    # must not turn the exit status into "killed by signal"
    ignore_signals()
    if code in (130, 143):
        # interrupted: whatever a stopped worker pool left half done (a thread waiting on a pipe
        # its killed worker never finished writing), the process ends within seconds with its
        # code; the one line is already written and nothing else is (outputs are discarded)
        import threading

        watchdog = threading.Timer(_INTERRUPTED_EXIT_S, os._exit, (code,))
        watchdog.daemon = True
        watchdog.start()
    reap_helpers()  # no helper process outlives us (a zombie where nothing reaps orphans)
    _exit(code)


#: the longest an interrupted command's clean-up may take before the process ends regardless
_INTERRUPTED_EXIT_S = 10.0


def _exit(code: int) -> None:
    """End the process with ``code``, the work done. The interpreter's own shutdown frees every
    object and module one by one (about 0.07 s after a 20 MB trace, a tenth of a small
    ``breakdown``, and more after a larger one) for a process that is about to end: where nothing
    else runs, the exit handlers run (``atexit``: logging, multiprocessing, Ray, temporary
    directories), the standard streams are flushed, and the process ends there. A thread still
    running, a stream that cannot be flushed, an unusual code, a profiler or tracer watching
    (``python -m cProfile -o``, a debugger: they write or stop after the program returns): the
    interpreter's exit, as always."""
    import atexit
    import threading

    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if isinstance(code, int) and 0 <= code <= 255 and threading.active_count() == 1 and not watched:
        atexit._run_exitfuncs()  # once: the interpreter's exit, if it comes to it, runs none again
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except (OSError, ValueError):
            sys.exit(code)  # the interpreter reports it as it always has
        if threading.active_count() == 1:
            os._exit(code)
    sys.exit(code)
