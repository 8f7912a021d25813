"""``traceanalyzer gate``: fail (exit code 8) when the latest run regressed against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.api.commandline import LAST_GOOD, gate_of, parse_threshold, read_store
from traceanalyzer.commands.common import StoreOpt, format_opt, output_opt, parsed_by, print_store_warnings
from traceanalyzer.errors import GateFailed
from traceanalyzer.outputs import Outputs
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
    outputs = Outputs([store])
    for o in (output, junit):
        if o is not None:
            outputs.check(o)
    st = read_store(store)
    results = gate_of(st, baseline, threshold, job)
    print_store_warnings(st)  # the damaged files skipped (an error above is one line on its own)
    failed = [r for r in results if not r.passed]
    from traceanalyzer.render import gate as render

    if format is GateFormat.json:
        write(render.json_bytes(results, baseline, threshold, job), output, outputs)
    elif results and all(r.passed and r.baseline is None for r in results):
        # a store too short to compare anything: one line, not one per job
        write(f"gate: no job has a baseline yet ({len(results)} job(s), each with one successful run): nothing to compare, passed.\n",
              output, outputs)
    else:
        write("".join(r.message + "\n" for r in results), output, outputs)  # one line per job, a failed job's explanation included
    if junit is not None:
        outputs.write_bytes(junit, render.junit_xml(results, threshold))
    if failed:
        from traceanalyzer.errors import few

        where = "in " + str(output) if output is not None else "above"
        if len(failed) == 1:
            r = failed[0]
            what = (f"run {r.latest} (job {r.job}) regressed {r.change:+.1%} against baseline {r.baseline}, above the "
                    f"{threshold:.1%} limit" if r.change is not None else f"run {r.latest} (job {r.job}) could not be analysed")
            raise GateFailed(f"gate failed: {what} (explained {where})")
        raise GateFailed(f"gate failed for {len(failed)} of {len(results)} job(s): {few(r.job for r in failed)} (each explained {where})")


def register(app: typer.Typer) -> None:
    app.command()(gate)
