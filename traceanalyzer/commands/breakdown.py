"""``traceanalyzer breakdown``: the exact partition of GPU time per rank and step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    AddressOpt, CommKernelOpt, Engine, EngineOpt, Format, QuietOpt, WorkersOpt, analyse_paths, comm_patterns, out_console, print_warnings,
)
from traceanalyzer.commands.common import RanksOpt, RankView
from traceanalyzer.render import json as json_render
from traceanalyzer.classify.comm import DEFAULT_BUS_BW_GBPS
from traceanalyzer.errors import ConfigError
from traceanalyzer.outputs import Outputs
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
    comm_kernel: CommKernelOpt = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration (TOML): its [trace] section (comm_kernels) is applied.")] = None,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE (default: the user cache directory, "
            "~/.cache/traceanalyzer on Linux) and reuse them for files with the same bytes.",
        ),
    ] = False,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
    ranks: RanksOpt = RankView.auto,
) -> None:
    """Split every rank's GPU time, per step, into compute / recompute / exposed comm / other / idle."""
    if not bus_bw > 0 or bus_bw == float("inf"):  # also NaN
        raise ConfigError(f"--bus-bw must be a finite positive number (GB/s), got {bus_bw}")
    if recompute_range is not None:
        try:
            re.compile(recompute_range)
        except re.error as exc:
            raise ConfigError(f"--recompute-range is not a valid regex: {exc}") from None
    patterns = comm_patterns(comm_kernel, config)
    outputs = Outputs([*paths, config])
    if output is not None:
        outputs.check(output)
    analysis = analyse_paths(paths, None if whole_trace else step_range, recompute_pattern=recompute_range, bus_bw_gbps=bus_bw,
                             cache=cache, workers=workers, engine=engine, address=address, quiet=quiet, comm_kernels=patterns)
    if format is Format.json:
        with outputs.stream(output) as fh:
            fh.write(json_render.dumps(json_render.document(analysis)))
    else:
        with outputs.stream(output, "w") as fh:
            console = out_console(None if output is None else fh, 120 if output is None else 160)
            from traceanalyzer.classify.rankspread import comm_spread, rank_spread, summarise_ranks
            from traceanalyzer.classify.stragglers import stragglers

            summary = rank_spread(analysis.steps) if summarise_ranks(len(analysis.trace.ranks), ranks.value) else None
            print_breakdown(analysis, console, summary)
            if detail:
                comm = comm_spread(analysis.comm) if summary is not None and analysis.comm is not None and analysis.comm.height else None
                print_detail(analysis, console, summary, stragglers(analysis.steps), comm)
    print_warnings(analysis.warnings)


def register(app: typer.Typer) -> None:
    app.command()(breakdown)
