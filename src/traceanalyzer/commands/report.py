"""``traceanalyzer report``: a report to attach to a ticket (HTML, Markdown or JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    Engine, stderr_console,
    comm_patterns, config_opt, format_opt, output_opt, print_warnings, step_name,
)
from traceanalyzer.commands.common import RankView
from traceanalyzer.render.formats import subset

ReportFormat = subset("html", "markdown", "json")


def _command(paths: list[Path], config: Path | None, fmt, embed: bool, output: Path | None,
             rank: int | None, step_range: str, top: int, baseline: list[Path] | None = None, whole_trace: bool = False) -> list[str]:
    """The command line that reproduces this report (canonical form of the options given)."""
    cmd = ["traceanalyzer", "report", *map(str, paths)]
    if config is not None:
        cmd += ["--config", str(config)]
    cmd += ["--format", fmt.value]
    if embed:
        cmd.append("--embed")
    if rank is not None:
        cmd += ["--rank", str(rank)]
    if whole_trace:
        cmd.append("--whole-trace")
    elif step_range != "ProfilerStep":
        cmd += ["--step-range", step_range]
    if top != 10:
        cmd += ["--top", str(top)]
    for b in baseline or []:
        cmd += ["--baseline", str(b)]
    if output is not None:
        cmd += ["-o", str(output)]
    return cmd


@shared_options
def report(
    paths,
    *,
    output: Annotated[Optional[Path], output_opt("Required for html and markdown; json goes to stdout without it.")] = None,
    format: Annotated[ReportFormat, format_opt("html: one self-contained file; markdown: GitHub-flavoured, PNGs beside it; json: the full report model.")] = ReportFormat.html,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML) for achieved TFLOP/s, MFU and the waterfall; its [trace] section is applied.")] = None,
    embed: Annotated[bool, typer.Option("--embed", help="Markdown: embed the plots as data: URIs instead of PNG files beside it.")] = False,
    rank: Annotated[Optional[int], typer.Option("--rank", min=0, metavar="RANK", help="Rank whose per-step timeline is shown (default: the slowest).")] = None,
    step_range, whole_trace,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, metavar="N", help="Rows in the top-kernel and top-collective tables.")] = 10,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output of this cluster (repeatable): the collective-efficiency section sets each collective's bus bandwidth against it (default: the hardware table).")] = None,
    comm_kernel, cache, workers, engine, address, quiet, ranks,
) -> None:
    """Write a report to attach to a ticket: headline, plots, top kernels and collectives, how to reproduce."""
    from traceanalyzer.api.documents import write_report
    from traceanalyzer.api.commandline import report_of

    if output is None and format is not ReportFormat.json:
        raise typer.BadParameter(f"--format {format.value} writes files: give the report file with -o", param_hint="'-o'")
    patterns = comm_patterns(comm_kernel, config)
    outputs = checked_outputs([*paths, config, *(baseline or [])], output)
    command = _command(paths, config, format, embed, output, rank, step_range, top, baseline, whole_trace)
    m, analysis = report_of(paths, rank=rank, config=config, step_range=step_range, step_name=step_name(step_range, whole_trace),
                            comm_kernels=patterns, top=top, baseline=baseline,
                            command=command + ([] if ranks is RankView.auto else ["--ranks", ranks.value]), ranks=ranks.value,
                            cache=cache, workers=workers, engine=Engine(engine).value, address=address, quiet=quiet, console=stderr_console)
    write_report(flagged(m), output, format.value, outputs, embed=embed)
    print_warnings([*analysis.warnings, *m["notes"]])


def register(app: typer.Typer) -> None:
    app.command()(report)
