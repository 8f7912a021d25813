"""``traceanalyzer gate``: fail (exit code 8) when the latest run regressed against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.api.commandline import gate_parts
from traceanalyzer.api.commandoptions import LAST_GOOD, parse_threshold
from traceanalyzer.commands.common import StoreOpt, format_opt, output_opt, parsed_by, checked_outputs, print_warnings
from traceanalyzer.errors import GateFailed
from traceanalyzer.render.formats import subset, write

GateFormat = subset("text", "json")


def gate(
    store: StoreOpt,
    baseline: Annotated[str, typer.Option("--baseline", metavar="RUN", help="A run id, or last-good (the last run that did not regress).")] = LAST_GOOD,
    max_regression: Annotated[str, typer.Option("--max-regression", metavar="PERCENT", callback=parsed_by(parse_threshold), help="Largest allowed slowdown of mean step time, e.g. 3%.")] = "3%",
    job: Annotated[Optional[str], typer.Option("--job", metavar="JOB", help="Check this job only (default: the latest run of every job).")] = None,
    format: Annotated[GateFormat, format_opt("text: one line per job; json: the verdict per job (schema traceanalyzer.gate).")] = GateFormat.text,
    output: Annotated[Optional[Path], output_opt()] = None,
    junit: Annotated[Optional[Path], typer.Option("--junit", metavar="FILE", help="Also write the verdict as JUnit XML (one test case per job) for CI systems.", show_default=False)] = None,
) -> None:
    """Compare the latest run with a baseline on mean step time; exit code 8 with an explanation if it regressed.

    The outputs (-o, --junit) are written before the exit code is set, pass or fail."""
    threshold = parse_threshold(max_regression)
    outputs = checked_outputs([store], output)
    if junit is not None:
        outputs.check(junit)
    results, warnings = gate_parts(store, baseline, threshold, job)
    print_warnings(warnings)  # the damaged files skipped (an error above is one line on its own)
    from traceanalyzer.render import gate as render

    write(render.json_bytes(results, baseline, threshold, job) if format is GateFormat.json else render.text(results), output, outputs)
    if junit is not None:
        outputs.write_bytes(junit, render.junit_xml(results, threshold))
    failed = render.failure(results, threshold, "in " + str(output) if output is not None else "above")
    if failed is not None:
        raise GateFailed(failed)


def register(app: typer.Typer) -> None:
    app.command()(gate)
