"""``traceanalyzer critical-path``: what each step waited on, piece by piece."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import FrameFormat, checked_outputs, format_opt, print_warnings, shared_options, stderr_console
from traceanalyzer.render.formats import write


@shared_options
def critical_path(
    paths, *,
    step: Annotated[Optional[int], typer.Option("--step", metavar="STEP", help="Only this step (default: every step).")] = None,
    rank: Annotated[Optional[int], typer.Option("--rank", metavar="RANK", help="Only this rank, on its own (default: all ranks, linked through their collectives).")] = None,
    format: Annotated[FrameFormat, format_opt("table: summary + longest pieces; json: summary and every segment; csv: every segment.")] = FrameFormat.table,  # type: ignore[valid-type]
    output,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, help="Longest pieces of the path listed in the table.")] = 10,
    step_range,
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Ignore step markers: each rank's whole trace is one step.")] = False,
    host_gaps: Annotated[bool, typer.Option("--host-gaps/--no-host-gaps", help="Weigh host time outside every op (Python between ops, sleeps, a slow "
                                             "data loader) as the host's (default); --no-host-gaps: only ops and runtime calls, as in HTA.")] = True,
    infer_waits: Annotated[bool, typer.Option("--infer-waits/--no-infer-waits", help="Link a kernel that started late to the kernel on another stream it waited for.")] = True,
    workers, cache, quiet,
) -> None:
    """The critical path of each step: the chain of host work, launches, kernels and waits that sets its length."""
    from traceanalyzer.api.commandline import critical_path_of
    from traceanalyzer.render import critpath as render

    outputs = checked_outputs(paths, output)
    cp = critical_path_of(paths, None if whole_trace else step_range, step=step, rank=rank, host_gaps=host_gaps, infer_waits=infer_waits,
                          cache=cache, workers=workers, quiet=quiet, console=stderr_console)
    if format is FrameFormat.table:
        write(lambda console: render.print_critical_path(cp, console, top), output, outputs, width=160)
    else:
        write(render.json_bytes(cp) if format is FrameFormat.json else render.csv_bytes(cp), output, outputs)
    print_warnings(cp.warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command("critical-path")(critical_path)
