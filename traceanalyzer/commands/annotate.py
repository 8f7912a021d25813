"""``traceanalyzer annotate``: the trace plus the classification as tracks, for Perfetto."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traceanalyzer.commands.common import (
    CacheOpt, CommKernelOpt, QuietOpt, StepRangeOpt, WholeTraceOpt, WorkersOpt, analyse_paths, comm_patterns, err_console, output_opt,
    print_warnings, step_name, traces_arg,
)
from traceanalyzer.outputs import Outputs
from traceanalyzer.parsers import discover


def annotate(
    paths: Annotated[list[Path], traces_arg()],
    output: Annotated[Path, output_opt("Annotated trace to write (.json or .json.gz), or a directory to write into (required for several rank files; created if missing, not its parents).")],
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: WholeTraceOpt = False,
    comm_kernel: CommKernelOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write the trace with one extra track per rank showing compute / recompute / exposed comm / other / idle (open it in Perfetto UI)."""
    from traceanalyzer.report.annotate import annotate as write_annotated, check_output

    patterns = comm_patterns(comm_kernel)
    outputs = Outputs(paths)
    check_output(outputs, output, sum(len(discover(p)) for p in paths))
    analysis = analyse_paths(paths, step_name(step_range, whole_trace), keep="events", cache=cache, workers=workers, quiet=quiet, comm_kernels=patterns)
    written = write_annotated(analysis, output, outputs)
    print_warnings(analysis.warnings)
    for f in written:
        err_console.print(f"wrote {f}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(annotate)
