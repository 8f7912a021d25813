"""Helpers shared by the command modules: loading with progress, writing output, warnings."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator

from rich.console import Console

from traceanalyzer.parsers import discover, load
from traceanalyzer.schema import Trace

err_console = Console(stderr=True, highlight=False)


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


def print_warnings(warnings: list[str]) -> None:
    from rich.markup import escape

    for w in warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(w)}", markup=True, soft_wrap=True)


def print_store_warnings(store) -> None:
    """The damaged files a read of a batch store skipped (names printed as they are, no markup)."""
    from rich.text import Text

    for w in store.warnings:
        err_console.print(Text.assemble(("warning:", "yellow"), " ", w), soft_wrap=True)


@contextmanager
def output_stream(output: Path | None) -> Iterator:
    if output is None:
        yield sys.stdout.buffer
    else:
        with open(output, "wb") as fh:
            yield fh
