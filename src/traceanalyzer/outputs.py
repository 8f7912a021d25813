"""Writing the files a command produces, without ever losing a user's data.

Every command writes through an :class:`Outputs` built from everything it reads (trace files,
every file inside an input directory, ``--config`` / ``--megatron-args`` files, a batch store):

* **an output never replaces an input**: an output path that is the same file as any input --
  the same path, another spelling (``../``), a symbolic link or a hard link to it (compared by
  resolved path *and* by device and inode) -- is refused before anything is written;
* **an output appears whole or not at all**: data goes to a temporary file in the target's own
  directory (``.<name>.<random>.tmp``) and is renamed over the target only once it is complete and
  flushed to disk, so an interruption, a crash or a full disk never leaves a partial file and
  never truncates an existing one; the temporary file is removed on every failure (and by
  :func:`remove_temporaries` when a signal ends the process);
* **no directory is created**: the directory an output goes into must exist. The only
  directories made are the ones named as the output itself (``annotate -o DIR`` for several
  ranks, ``batch --store DIR``), and only inside an existing parent;
* **an output symlink is written through**: the file it points to is replaced, the link stays;
  an output that is not a regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written
  in place.

Every failure is an :class:`~traceanalyzer.errors.OutputError` (exit 3) naming the output path.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from traceanalyzer.errors import OutputError
from traceanalyzer.interrupts import held_signals

#: temporary files being written now (removed by :func:`remove_temporaries` on a signal)
_TEMPORARIES: set[str] = set()


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied (the directory is not writable)" if exc.errno != errno.EROFS else "read-only file system"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno == errno.EISDIR:
        return "is a directory: give a file name"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "the directory does not exist (traceanalyzer creates no directories)"
    return exc.strerror or str(exc)


class Outputs:
    """The inputs of one command, and safe writes of its outputs (see the module docstring)."""

    def __init__(self, inputs: Iterable[str | Path | None] = ()):
        self._inputs: list[str] = [str(p) for p in inputs if p is not None]
        self._ids: dict[tuple[int, int], str] | None = None  # built on first need
        self._paths: dict[str, str] = {}

    def protect(self, path: str | Path) -> None:
        """Add an input: a file, or a directory (every file under it, symlinks followed)."""
        self._inputs.append(str(path))
        self._ids = None

    def _index(self) -> dict[tuple[int, int], str]:
        if self._ids is None:
            self._ids, self._paths = {}, {}
            for path in self._inputs:
                if os.path.isdir(path):
                    for top, _dirs, files in os.walk(path):
                        for name in files:
                            self._add(os.path.join(top, name))
                else:
                    self._add(path)
        return self._ids

    def _add(self, file: str) -> None:
        try:
            st = os.stat(file)
        except OSError:  # an unreadable input: the loader reports it
            return
        assert self._ids is not None
        self._ids[(st.st_dev, st.st_ino)] = file
        self._paths[os.path.realpath(file)] = file

    def _input_named(self, path: str) -> str | None:
        """The input that ``path`` is the same file as, or None (an output that does not exist
        yet is no input: the inputs are only listed when an output already exists)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        ids = self._index()
        return self._paths.get(os.path.realpath(path)) or ids.get((st.st_dev, st.st_ino))

    def check(self, path: str | Path) -> Path:
        """Refuse an output file that is an input, a directory, or in a missing directory: call
        it before the work, so a mistake costs no time. Returns the path."""
        p = Path(path)
        same = self._input_named(str(p))
        if same is not None:
            also = "" if same == str(p) else f" ({same})"
            raise OutputError(f"refusing to overwrite an input{also}: choose another output file", p)
        if os.path.isdir(p):
            raise OutputError("is a directory: give a file name", p)
        if _special(p):  # /dev/null, /dev/stdout, a named pipe: written in place
            return p
        parent = Path(os.path.realpath(p)).parent
        if not os.path.isdir(parent):
            raise OutputError(f"the directory {p.parent} does not exist (traceanalyzer creates no directories)", p)
        if len(p.name.encode()) > _name_max(parent):
            raise OutputError("file name too long", p)
        return p

    def check_dir(self, path: str | Path) -> Path:
        """An output directory the command may create (inside an existing parent)."""
        p = Path(path)
        if os.path.lexists(p) and not os.path.isdir(p):
            raise OutputError("is a file, not a directory", p)
        if not os.path.isdir(p) and not os.path.isdir(os.path.dirname(os.path.realpath(p))):
            raise OutputError(f"the directory {p.parent} does not exist (traceanalyzer creates no directories)", p)
        return p

    def make_dir(self, path: str | Path) -> Path:
        """:meth:`check_dir`, then create it (not its parents)."""
        p = self.check_dir(path)
        try:
            p.mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the directory: {_why(exc)}", p) from None
        return p

    @contextmanager
    def open(self, path: str | Path, mode: str = "wb") -> Iterator[IO]:
        """A file object for ``path`` (``"wb"`` or ``"w"``); the file replaces ``path`` when the
        block ends without an exception, and is discarded otherwise."""
        p = self.check(path)
        if _special(p):
            try:
                with open(p, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                    yield fh
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    raise
                raise OutputError(f"cannot write: {_why(exc)}", p) from None
            return
        target = os.path.realpath(p)  # write through a symlink
        try:
            with held_signals():
                fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:80]}.", suffix=".tmp", dir=os.path.dirname(target))
                _TEMPORARIES.add(tmp)
        except OSError as exc:
            raise OutputError(f"cannot write: {_why(exc)}", p) from None
        try:
            try:
                with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                    yield fh
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(tmp, _mode_for(target))
                os.replace(tmp, target)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    raise
                raise OutputError(f"cannot write: {_why(exc)}", p) from None
        finally:
            _discard_temporary(tmp)

    def write_bytes(self, path: str | Path, data: bytes) -> Path:
        with self.open(path, "wb") as fh:
            fh.write(data)
        return Path(path)

    def write_text(self, path: str | Path, text: str) -> Path:
        with self.open(path, "w") as fh:
            fh.write(text)
        return Path(path)

    @contextmanager
    def stream(self, path: str | Path | None, mode: str = "wb") -> Iterator[IO]:
        """:meth:`open`, or standard output when ``path`` is None."""
        if path is None:
            import sys

            yield sys.stdout.buffer if "b" in mode else sys.stdout
            return
        with self.open(path, mode) as fh:
            yield fh


def replace_atomically(target: str | Path, write, *, fsync: bool = False, before_replace=None) -> None:
    """The shared safe writer for files the package keeps for itself (cache entries, store
    tables): ``write(tmp_path)`` fills a temporary file beside ``target``, which then replaces
    ``target`` (after ``before_replace()``, a test hook); on any failure or signal the temporary
    file is removed and ``target`` is left as it was. OS errors propagate to the caller, which
    decides what they mean (a cache skips the entry, the store reports the path)."""
    target = Path(target)
    with held_signals():
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:80]}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        _TEMPORARIES.add(tmp)
    try:
        write(Path(tmp))
        if fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(str(target)))  # mkstemp's 0600 would hide the file from other users
        if before_replace is not None:
            before_replace()
        os.replace(tmp, target)
    finally:
        _discard_temporary(tmp)


def _discard_temporary(tmp: str) -> None:
    """Remove a temporary file of an output (already gone once renamed into place) and forget it,
    signals held so that an interrupt cannot leave it behind."""
    with held_signals():
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # renamed into place
            pass
        _TEMPORARIES.discard(tmp)


def _special(path: str | Path) -> bool:
    """An existing output that is not a regular file (a device such as /dev/null, a pipe): it is
    written in place, never replaced by a renamed file."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _mode_for(target: str) -> int:
    """Keep an existing file's permissions; a new file gets the usual ``0o666 & ~umask``."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def remove_temporaries() -> None:
    """Remove the temporary files of writes still in progress (on a signal, before exiting)."""
    for tmp in list(_TEMPORARIES):
        _TEMPORARIES.discard(tmp)
        try:
            os.unlink(tmp)
        except OSError:
            pass


#: the environment variable that asks for progress lines where stderr is not a terminal
PROGRESS_ENV = "TRACEANALYZER_PROGRESS"


def progress_lines_asked() -> bool:
    """Whether progress lines were asked for where stderr is not a terminal (a CI log that
    wants them): ``TRACEANALYZER_PROGRESS=lines`` (or ``1``, ``yes``, ``true``). Without it,
    progress shows on a terminal only."""
    import os

    return os.environ.get(PROGRESS_ENV, "").strip().lower() in ("lines", "1", "yes", "true")


#: the variables by which rich's console treats a stream as a terminal, or not, whatever it is
RICH_TERMINAL_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE")


def may_be_terminal() -> bool:
    """Whether rich could find stderr a terminal: it is one, or the environment may say so
    (rich decides then); False for a file, a pipe or a notebook's stream."""
    if any(v in os.environ for v in RICH_TERMINAL_VARIABLES):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):  # no stderr, or a closed one
        return False
