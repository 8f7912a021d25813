"""``traceanalyzer stragglers``: who made the others wait, and what each rank costs the job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    CacheOpt, CommKernelOpt, QuietOpt, StepRangeOpt, WholeTraceOpt, WorkersOpt, comm_patterns, stderr_console, format_opt, non_negative_number,
    output_opt, print_warnings, step_name, traces_arg,
)
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.formats import subset, write

StragglerFormat = subset("table", "json")


def stragglers(
    paths: Annotated[list[Path], traces_arg()],
    format: Annotated[StragglerFormat, format_opt("table: the ranks that made the others wait, those that waited, the costliest "
                                                  "phases; json: every table (ranks, costs, replay, wait_matrix).")] = StragglerFormat.table,  # type: ignore[valid-type]
    output: Annotated[Optional[Path], output_opt()] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, help="Rows of each table.")] = 10,
    tolerance: Annotated[float, typer.Option("--tolerance", metavar="FRACTION", callback=non_negative_number,
                                             help="A rank is slow on a step above the step's median by more than this fraction.")] = 0.05,
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: WholeTraceOpt = False,
    comm_kernel: CommKernelOpt = None,
    workers: WorkersOpt = None,
    cache: CacheOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Across ranks: who made the others wait, and what each rank's phases cost the job's step time."""
    from traceanalyzer.api.commandline import stragglers_of
    from traceanalyzer.render import stragglers as render

    outputs = Outputs(paths)
    if output is not None:
        outputs.check(output)
    view, analysis = stragglers_of(paths, step_name(step_range, whole_trace), tolerance=tolerance, cache=cache, workers=workers,
                                   quiet=quiet, comm_kernels=comm_patterns(comm_kernel), console=stderr_console)
    if format is StragglerFormat.table:
        write(lambda console: render.print_view(view, console, top), output, outputs, width=160)
    else:
        write(render.json_bytes(view, tolerance), output, outputs)
    print_warnings([*analysis.warnings, *view["warnings"]], shows_transfer=True)


def register(app: typer.Typer) -> None:
    app.command()(stragglers)
