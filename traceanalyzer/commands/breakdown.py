"""``traceanalyzer breakdown``: the exact partition of GPU time per rank and step."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from traceanalyzer.commands.common import AddressOpt, Engine, EngineOpt, Format, QuietOpt, WorkersOpt, analyse_paths, output_stream, print_warnings
from traceanalyzer.render import json as json_render
from traceanalyzer.classify.comm import DEFAULT_BUS_BW_GBPS
from traceanalyzer.errors import ConfigError
from traceanalyzer.render.table import print_breakdown, print_detail


def breakdown(
    paths: Annotated[list[Path], typer.Argument(help="Trace file(s) or a directory of rank traces (.json, .json.gz, nsys .sqlite).", show_default=False)],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    step_range: Annotated[str, typer.Option("--step-range", help="Name of the range that marks a training step.")] = "ProfilerStep",
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Ignore step markers: analyse each rank's whole GPU span as one step.")] = False,
    detail: Annotated[bool, typer.Option("--detail", help="Also print the causes: idle by cause, communication by type/group, recomputed ops, cross-rank skew.")] = False,
    recompute_range: Annotated[Optional[str], typer.Option("--recompute-range", help="Regex of extra host/NVTX ranges whose contents are recompute (e.g. 'CheckpointFunctionBackward').")] = None,
    bus_bw: Annotated[float, typer.Option("--bus-bw", help="Bus bandwidth (GB/s) for estimating collective transfer time when only one rank of a group is loaded.")] = DEFAULT_BUS_BW_GBPS,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE (default ~/.cache/traceanalyzer) "
            "and reuse them while the file is unchanged (size and mtime).",
        ),
    ] = False,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Split every rank's GPU time, per step, into compute / recompute / exposed comm / other / idle."""
    if bus_bw <= 0:
        raise ConfigError(f"--bus-bw must be positive, got {bus_bw}")
    if recompute_range is not None:
        try:
            re.compile(recompute_range)
        except re.error as exc:
            raise ConfigError(f"--recompute-range is not a valid regex: {exc}") from None
    analysis = analyse_paths(paths, None if whole_trace else step_range, recompute_pattern=recompute_range, bus_bw_gbps=bus_bw,
                             cache=cache, workers=workers, engine=engine, address=address, quiet=quiet)
    if format is Format.json:
        with output_stream(output) as fh:
            fh.write(json_render.dumps(json_render.document(analysis)))
    else:
        if output is None:
            console = Console(width=None if sys.stdout.isatty() else 120)
            print_breakdown(analysis, console)
            if detail:
                print_detail(analysis, console)
        else:
            with open(output, "w") as fh:
                console = Console(file=fh, width=160)
                print_breakdown(analysis, console)
                if detail:
                    print_detail(analysis, console)
    print_warnings(analysis.warnings)


def register(app: typer.Typer) -> None:
    app.command()(breakdown)
