"""``traceanalyzer annotate``: the trace plus the classification as tracks, for Perfetto."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traceanalyzer.commands.common import (
    comm_patterns, output_opt, print_warnings, shared_options, stderr_console, stderr_line, step_name,
)
from traceanalyzer.outputs import Outputs


@shared_options
def annotate(
    paths, *,
    output: Annotated[Path, output_opt(help="A name ending in .json or .json.gz: the one file to write (one rank file, or --merge). Any other name: a directory to write each rank's trace into (created if missing, not its parents). Never an input.")],
    merge: Annotated[bool, typer.Option("--merge", help="Write every rank into one trace (one process per rank, for Perfetto), rebuilt from the parsed events.")] = False,
    step_range, whole_trace, comm_kernel, cache, workers, quiet,
) -> None:
    """Write the trace with tracks per rank showing compute / recompute / exposed comm / other / idle (open it in Perfetto UI).

    Kineto input keeps its own events; Nsight Systems input (and --merge) is rebuilt from the parsed events."""
    from traceanalyzer.api.commandline import annotate_files

    patterns = comm_patterns(comm_kernel)
    outputs = Outputs(paths)
    written, warnings = annotate_files(paths, output, outputs, merge=merge, step_range=step_name(step_range, whole_trace), cache=cache,
                                       workers=workers, quiet=quiet, comm_kernels=patterns, console=stderr_console)
    print_warnings(warnings)
    for f in written:
        stderr_line(f"wrote {f}")


def register(app: typer.Typer) -> None:
    app.command()(annotate)
