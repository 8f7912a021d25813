"""``traceanalyzer stragglers``: who made the others wait, and what each rank costs the job."""

from __future__ import annotations

from typing import Annotated

import typer

from traceanalyzer.commands.common import (
    flagged,
    checked_outputs, comm_patterns, format_opt, non_negative_number, print_warnings, shared_options, stderr_console, step_name,
)
from traceanalyzer.render.formats import subset, write

StragglerFormat = subset("table", "json")


@shared_options
def stragglers(
    paths, *,
    format: Annotated[StragglerFormat, format_opt("table: the ranks that made the others wait, those that waited, the costliest "
                                                  "phases; json: every table (ranks, costs, replay, wait_matrix).")] = StragglerFormat.table,  # type: ignore[valid-type]
    output,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, help="Rows of each table.")] = 10,
    tolerance: Annotated[float, typer.Option("--tolerance", metavar="FRACTION", callback=non_negative_number,
                                             help="A rank is slow on a step above the step's median by more than this fraction.")] = 0.05,
    step_range, whole_trace, comm_kernel, workers, cache, quiet,
) -> None:
    """Across ranks: who made the others wait, and what each rank's phases cost the job's step time."""
    from traceanalyzer.api.commandline import stragglers_of
    from traceanalyzer.render import stragglers as render

    outputs = checked_outputs(paths, output)
    view, analysis = stragglers_of(paths, step_name(step_range, whole_trace), tolerance=tolerance, cache=cache, workers=workers,
                                   quiet=quiet, comm_kernels=comm_patterns(comm_kernel), console=stderr_console)
    if format is StragglerFormat.table:
        write(lambda console: render.print_view(view, console, top), output, outputs, width=160)
    else:
        write(render.json_bytes(flagged(view), tolerance), output, outputs)
    print_warnings([*analysis.warnings, *view["warnings"]], shows_transfer=True)


def register(app: typer.Typer) -> None:
    app.command()(stragglers)
