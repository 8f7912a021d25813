"""Helpers shared by the command modules: analysing with progress, writing output, warnings."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

from rich.console import Console
from rich.text import Text

import typer

from traceanalyzer.outputs import Outputs

#: stderr; ``markup=False``: user text (kernel, category, file names) is printed as it is
err_console = Console(stderr=True, highlight=False, markup=False)


def out_console(file=None, width: int | None = None) -> Console:
    """A console for results (stdout, or an output file): no markup interpretation of user text,
    no highlighting; ``width``: fixed width when not a terminal."""
    if file is None:
        return Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else width)
    return Console(file=file, highlight=False, markup=False, width=width)


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
    comm_kernels: list[str] | None = None,
):
    """Load and classify traces on the engine (rank files in parallel), with progress on stderr
    (a bar on a terminal, a line per rank file otherwise, nothing with ``quiet``). ``keep``: what
    the renderer needs beyond the compact tables (see :data:`traceanalyzer.engine.KEEP`)."""
    from traceanalyzer.engine import Options, analyse

    opts = Options(step_name=step_name, recompute_pattern=recompute_pattern, keep=keep, cache=cache,
                   comm_kernels=tuple(comm_kernels or ()))
    if bus_bw_gbps is not None:
        opts.bus_bw_gbps = bus_bw_gbps
    return analyse(paths, opts, engine=Engine(engine).value, workers=workers, address=address, quiet=quiet, console=err_console)


#: the option every command that classifies kernels takes
CommKernelOpt = Annotated[
    Optional[list[str]],
    typer.Option("--comm-kernel", help="Regex (case-insensitive) of kernel names that are communication, besides the known "
                 "libraries (NCCL/RCCL, DeepEP, NVSHMEM, userbuffers, custom all-reduce, MSCCL++). Repeatable; "
                 "also [trace] comm_kernels in the run configuration."),
]


def comm_patterns(cli: list[str] | None, config: Path | None = None, megatron_args: Path | None = None) -> list[str]:
    """The communication-kernel regexes of a command: ``--comm-kernel`` and the run
    configuration's ``[trace] comm_kernels``, each checked (exit 7 naming a bad one)."""
    from traceanalyzer.classify.labels import check_comm_pattern

    from traceanalyzer.errors import ConfigError

    patterns = list(cli or [])
    for p in patterns:
        check_comm_pattern(p)
    if config is not None or megatron_args is not None:
        from traceanalyzer.model import load_config

        cfg = load_config(config, megatron_args)
        for p in cfg.trace.comm_kernels:
            try:
                check_comm_pattern(p)
            except ConfigError as exc:
                raise ConfigError(exc.message.replace("--comm-kernel", "[trace] comm_kernels", 1), cfg.source) from None
            if p not in patterns:
                patterns.append(p)
    return patterns


def warning_line(text: str) -> Text:
    """``warning: <text>`` with the label coloured and the text printed as it is (no markup)."""
    return Text.assemble(("warning:", "yellow"), " ", text)


def print_warnings(warnings: list[str]) -> None:
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


class RankView(str, Enum):
    auto = "auto"
    all = "all"
    summary = "summary"


#: how commands that show one row per rank show many ranks (breakdown, report)
RanksOpt = Annotated[
    RankView,
    typer.Option("--ranks", help="auto: every rank up to 16 ranks, their distribution (min / p50 / max, slowest ranks) above; "
                 "all: every rank; summary: the distribution whatever the count."),
]
