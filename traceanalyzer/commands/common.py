"""Helpers shared by the command modules: loading with progress, writing output, warnings."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

from rich.console import Console
from rich.text import Text

from traceanalyzer.outputs import Outputs
from traceanalyzer.parsers import discover, load
from traceanalyzer.schema import Trace

#: stderr; ``markup=False``: user text (kernel, category, file names) is printed as it is
err_console = Console(stderr=True, highlight=False, markup=False)


def out_console(file=None, width: int | None = None) -> Console:
    """A console for results (stdout, or an output file): no markup interpretation of user text,
    no highlighting; ``width``: fixed width when not a terminal."""
    if file is None:
        return Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else width)
    return Console(file=file, highlight=False, markup=False, width=width)


class Format(str, Enum):
    table = "table"
    json = "json"


def load_with_progress(paths: list[Path], show: bool, cache: bool = False) -> Trace:
    """Load traces; show a progress bar on an interactive stderr when there is much to read.
    ``cache``: use the Parquet parse cache (see :mod:`traceanalyzer.cache`)."""
    files = [f for p in paths for f in discover(p)]
    big = sum(f.stat().st_size for f in files if f.is_file()) > 20 * 2**20
    if not (show and sys.stderr.isatty() and (len(files) > 1 or big)):
        return load(paths if len(paths) > 1 else paths[0], cache=cache)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("loading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console, transient=True
    ) as bar:
        task = bar.add_task("load", total=len(files))
        return load(paths if len(paths) > 1 else paths[0], progress=lambda _f: bar.advance(task), cache=cache)


def warning_line(text: str) -> Text:
    """``warning: <text>`` with the label coloured and the text printed as it is (no markup)."""
    return Text.assemble(("warning:", "yellow"), " ", text)


def print_warnings(warnings: list[str]) -> None:
    from rich.markup import escape

    for w in warnings:
        err_console.print(warning_line(w), soft_wrap=True)


def print_store_warnings(store) -> None:
    """The damaged files a read of a batch store skipped (names printed as they are, no markup)."""
    for w in store.warnings:
        err_console.print(warning_line(w), soft_wrap=True)


def output_stream(output: Path | None, inputs: list | tuple = (), mode: str = "wb"):
    """stdout, or ``output`` written safely (:class:`~traceanalyzer.outputs.Outputs`: never an
    input, whole or not at all)."""
    return Outputs(inputs).stream(output, mode)
