"""Progress of a job, by bytes read: one bar on a terminal, one line per rank file otherwise.

* stderr is a terminal: one rich bar for the whole job — bytes read of the total (compressed
  bytes for a ``.gz``, so the bar moves while one file inflates), ranks done, time left;
* stderr is not a terminal (cron, CI logs, a pipe): nothing, unless asked for with
  ``TRACEANALYZER_PROGRESS=lines``: then one plain line per rank file as it completes;
* ``quiet``: nothing.

Shown only for inputs that take more than about a second: more than :data:`SHOW_BYTES` of JSON
(a ``.gz`` counts its inflated size, read from the gzip trailer).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from traceanalyzer.outputs import may_be_terminal
from traceanalyzer.outputs import progress_lines_asked as lines_asked

#: about a second of decoding on one core
SHOW_BYTES = 20 * 2**20


def json_bytes(path: Path) -> int:
    """The size of the JSON a file holds: its size, or for gzip the inflated size (trailer)."""
    try:
        size = path.stat().st_size
        if not path.name.endswith(".gz") or size < 18:
            return size
        with open(path, "rb") as fh:
            fh.seek(-4, 2)
            isize = int.from_bytes(fh.read(4), "little")
        # ISIZE is the inflated size mod 2**32; in a truncated file it is whatever bytes the cut left
        # there: trusted only within deflate's ratio (at most ~1032:1)
        return isize if size <= isize <= 1032 * size else size
    except OSError:
        return 0


class JobProgress:
    """Collects ``bytes(index, n)`` and ``done(index, file, seconds)`` from the engine.
    ``console``: a rich console, or a function that makes one (called only where progress is
    shown), or None (one of stderr, made where progress is shown)."""

    def __init__(self, files: list[Path], quiet: bool = False, label: str = "analysing", console=None,
                 unit: str = "rank file"):
        self.sizes = {}
        for i, f in enumerate(files):
            try:
                self.sizes[i] = f.stat().st_size if f.is_file() else 0
            except OSError:
                self.sizes[i] = 0
        self.total = sum(self.sizes.values())
        self.read = dict.fromkeys(self.sizes, 0)
        self.n = len(files)
        self.finished = 0
        self.unit = unit
        self.label = label
        self._lock = threading.Lock()
        self._bar = None
        self._task = None
        big = not quiet and sum(json_bytes(f) for f in files if f.is_file()) > SHOW_BYTES
        # rich (0.015-0.08 s to import) only where a bar can be shown: stderr a terminal, or rich
        # told by the environment to treat it as one
        if big and console is not None and not hasattr(console, "is_terminal"):
            console = console() if may_be_terminal() else None  # a function that makes the console
        elif console is None and big and may_be_terminal():
            from rich.console import Console

            console = Console(stderr=True, highlight=False)
        self.console = console
        bar = big and console is not None and console.is_terminal
        self.mode = "bar" if bar else ("lines" if big and lines_asked() else "quiet")
        self._t0 = time.perf_counter()
        if self.mode == "bar":
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._bar = Progress(
                TextColumn(label), BarColumn(), DownloadColumn(), TextColumn("{task.fields[ranks]}"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
            )
            self._task = self._bar.add_task(label, total=self.total or 1, ranks=self._ranks())
            self._bar.start()

    def _ranks(self) -> str:
        return f"{self.finished}/{self.n} {self.unit}s"

    def bytes(self, index: int, n: int) -> None:
        with self._lock:
            cap = self.sizes.get(index, 0) - self.read.get(index, 0)
            n = max(0, min(n, cap))
            self.read[index] = self.read.get(index, 0) + n
            if self._bar is not None and n:
                self._bar.update(self._task, advance=n)

    def done(self, index: int, name: str, seconds: float | None = None, failed: bool = False) -> None:
        """Rank file ``index`` is done (``failed``: with an error, which the command reports:
        no progress line for it, so an error stays one line)."""
        with self._lock:
            rest = self.sizes.get(index, 0) - self.read.get(index, 0)
            self.read[index] = self.sizes.get(index, 0)
            self.finished += 1
            if self._bar is not None:
                self._bar.update(self._task, advance=max(rest, 0), ranks=self._ranks())
            elif self.mode == "lines" and not failed:
                mb = self.sizes.get(index, 0) / 2**20
                took = f", {seconds:.1f} s" if seconds is not None else ""
                elapsed = time.perf_counter() - self._t0
                print(f"traceanalyzer: {self.unit} {self.finished}/{self.n} done: {name} ({mb:,.1f} MB{took}; "
                      f"{elapsed:.0f} s elapsed)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "JobProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
