"""``traceanalyzer breakdown``: the exact partition of GPU time per rank and step."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from traceanalyzer.classify import analyze
from traceanalyzer.commands.common import Format, load_with_progress, output_stream, print_warnings
from traceanalyzer.render import json as json_render
from traceanalyzer.render.table import print_breakdown


def breakdown(
    paths: Annotated[list[Path], typer.Argument(help="Trace file(s) or a directory of rank traces (.json, .json.gz, nsys .sqlite).", show_default=False)],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    step_range: Annotated[str, typer.Option("--step-range", help="Name of the range that marks a training step.")] = "ProfilerStep",
    cache: Annotated[
        bool,
        typer.Option(
            "--cache/--no-cache",
            help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE (default ~/.cache/traceanalyzer) "
            "and reuse them while the file is unchanged (size and mtime).",
        ),
    ] = False,
) -> None:
    """Split every rank's GPU time, per step, into compute / recompute / exposed comm / other / idle."""
    trace = load_with_progress(paths, show=True, cache=cache)
    analysis = analyze(trace, step_range)
    if format is Format.json:
        with output_stream(output) as fh:
            fh.write(json_render.dumps(json_render.document(analysis)))
    else:
        if output is None:
            print_breakdown(analysis, Console(width=None if sys.stdout.isatty() else 120))
        else:
            with open(output, "w") as fh:
                print_breakdown(analysis, Console(file=fh, width=160))
    print_warnings(analysis.warnings)


def register(app: typer.Typer) -> None:
    app.command()(breakdown)
