"""``traceanalyzer gate``: fail (exit code 8) when the latest run regressed against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.batch.gate import LAST_GOOD, gate_check, parse_threshold
from traceanalyzer.batch.store import Store
from traceanalyzer.commands.common import print_store_warnings
from traceanalyzer.errors import GateFailed


def gate(
    store: Annotated[Path, typer.Option("--store", help="Store written by `traceanalyzer batch`.", show_default=False)],
    baseline: Annotated[str, typer.Option("--baseline", help="A run id, or last-good (the last run that did not regress).")] = LAST_GOOD,
    max_regression: Annotated[str, typer.Option("--max-regression", help="Largest allowed slowdown of mean step time, e.g. 3%.")] = "3%",
    job: Annotated[Optional[str], typer.Option("--job", help="Check this job only (default: the latest run of every job).")] = None,
) -> None:
    """Compare the latest run with a baseline on mean step time; exit code 8 with an explanation if it regressed."""
    threshold = parse_threshold(max_regression)
    st = Store(store)
    results = gate_check(st, baseline, threshold, job)
    print_store_warnings(st)  # the damaged files skipped (an error above is one line on its own)
    failed = [r for r in results if not r.passed]
    for r in results:
        if r.passed:
            typer.echo(r.message)
    if failed:
        raise GateFailed("gate failed. " + " ".join(r.message for r in failed))


def register(app: typer.Typer) -> None:
    app.command()(gate)
