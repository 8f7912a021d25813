"""Helpers shared by the command modules: analysing with progress, writing output, warnings."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterator, Optional

from rich.console import Console

import typer

err_console = Console(stderr=True, highlight=False)


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class Format(str, Enum):
    table = "table"
    json = "json"


#: options every command that loads traces takes
WorkersOpt = Annotated[
    Optional[int],
    typer.Option("--workers", min=1, help="Rank files analysed in parallel (processes; default: all cores; 1: in this process)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (warnings and errors still go there).")]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="local: process pool on this machine; ray: one Ray task per rank file.")]
AddressOpt = Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (ray://host:10001 or host:6379); default: a local Ray.")]


def analyse_paths(
    paths: list[Path],
    step_name: str | None = "ProfilerStep",
    *,
    recompute_pattern: str | None = None,
    bus_bw_gbps: float | None = None,
    cache: bool = False,
    keep: str = "compact",
    workers: int | None = None,
    engine: Engine | str = "local",
    address: str | None = None,
    quiet: bool = False,
):
    """Load and classify traces on the engine (rank files in parallel), with progress on stderr
    (a bar on a terminal, a line per rank file otherwise, nothing with ``quiet``). ``keep``: what
    the renderer needs beyond the compact tables (see :data:`traceanalyzer.engine.KEEP`)."""
    from traceanalyzer.engine import Options, analyse

    opts = Options(step_name=step_name, recompute_pattern=recompute_pattern, keep=keep, cache=cache)
    if bus_bw_gbps is not None:
        opts.bus_bw_gbps = bus_bw_gbps
    return analyse(paths, opts, engine=Engine(engine).value, workers=workers, address=address, quiet=quiet, console=err_console)


def print_warnings(warnings: list[str]) -> None:
    for w in warnings:
        err_console.print(f"[yellow]warning:[/yellow] {w}", markup=True, soft_wrap=True)


@contextmanager
def output_stream(output: Path | None) -> Iterator:
    if output is None:
        yield sys.stdout.buffer
    else:
        with open(output, "wb") as fh:
            yield fh
