"""``traceanalyzer batch``: analyse every run under ROOT... into a Parquet store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.api.nightly import batch_summary
from traceanalyzer.api.commandline import run_batch
from traceanalyzer.commands.common import (
    AddressOpt, CacheOpt, Engine, EngineOpt, OutputOpt, StepRangeOpt, config_opt, format_opt, store_opt,
    stderr_console, stderr_line,
)


from traceanalyzer.outputs import Outputs
from traceanalyzer.render.formats import subset, write

BatchFormat = subset("text", "json")


def batch(
    roots: Annotated[list[Path], typer.Argument(metavar="RUN...", help="Directories (searched recursively) or trace files; each run = a directory of rank traces or one trace.", show_default=False)],
    store: Annotated[Path, store_opt("Store directory (Parquet dataset, created if missing).")],
    force: Annotated[bool, typer.Option("--force", help="Re-analyse runs already stored, replacing their rows.")] = False,
    engine: EngineOpt = Engine.local,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, metavar="N", help="Rank files analysed in parallel, over all runs: processes (local; default: all cores) or CPUs of a local Ray.")] = None,
    address: AddressOpt = None,
    config: Annotated[Optional[Path], config_opt("Run configuration (run.toml) for MFU, for runs whose manifest names none.")] = None,
    step_range: StepRangeOpt = "ProfilerStep",
    cache: CacheOpt = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (a bar on a terminal, else a line per run).")] = False,
    format: Annotated[BatchFormat, format_opt("text: the summary in words; json: the summary as a document (schema traceanalyzer.batch).")] = BatchFormat.text,
    output: OutputOpt = None,
) -> None:
    """Analyse nightly runs into a Parquet store (skips runs stored on the same inputs); summary at the end.

    A second batch on the same store waits for the first (one line on stderr says so)."""
    if config is not None and not config.is_file():
        from traceanalyzer.errors import InputNotFound

        raise InputNotFound("configuration file not found", config)
    outputs = Outputs([*roots, config])
    outputs.check_dir(store)  # the store: a directory (created inside an existing parent)
    if output is not None:
        outputs.protect(store)
        outputs.check(output)
    show = sys.stderr.isatty() and not quiet
    from traceanalyzer.outputs import progress_lines_asked

    lines = not sys.stderr.isatty() and not quiet and progress_lines_asked()  # cron logs that ask: one line per run
    progress = None
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        progress = Progress(TextColumn("analysing runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TimeRemainingColumn(), TextColumn("{task.description}", markup=False), console=stderr_console(), transient=True)
    task = None

    def on_plan(n: int) -> None:
        nonlocal task
        if progress is not None:
            progress.start()
            task = progress.add_task("", total=n)

    done = 0

    def on_done(spec, result) -> None:
        nonlocal done
        done += 1
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=spec.run_id)
        elif lines:
            print(f"traceanalyzer: run {done} done: {spec.run_id} ({result.row['status']}, {len(spec.files)} file(s), "
                  f"{result.seconds:.1f} s)", file=sys.stderr, flush=True)

    try:
        summary = run_batch(roots, store, force=force, engine=engine.value, workers=workers, address=address,
                            config=config, step_range=step_range, cache=cache, on_plan=on_plan, on_done=on_done,
                            on_notice=lambda msg: stderr_line(f"batch: {msg}"))
    finally:
        if progress is not None:
            progress.stop()
    total = len(summary.analysed) + len(summary.skipped) + len(summary.failed)
    if format is BatchFormat.json:
        from traceanalyzer.render.json import dumps

        write(dumps(summary_document(summary, store, force)), output, outputs)
    else:
        from traceanalyzer.commands.flags import as_flags

        def text(out) -> None:
            out.print(
                f"batch: {total} run(s): {len(summary.analysed)} analysed"
                f"{f' ({len(summary.reanalysed)} again: input changed)' if summary.reanalysed else ''}"
                f" ({summary.cache_hits} from the parse cache), {len(summary.skipped)} skipped (already stored"
                f"{'' if force else '; --force re-analyses'}), {len(summary.failed)} failed; store: {store}",
                soft_wrap=True,
            )
            for f in summary.failed:
                out.print(f"  failed: {f['run_id']}: {as_flags(f['error'])} (exit code {f['exit_code']}, {f['error_class']})", soft_wrap=True)

        write(text, output, outputs, width=160)
    for run_id, warns in summary.warnings.items():
        for w in warns:
            stderr_line(f"{run_id}: {w}", "warning:")
    if summary.failed:
        from traceanalyzer.errors import RunsFailed, few

        raise RunsFailed(f"{len(summary.failed)} of {total} run(s) failed (the others are stored in {store}): "
                         + few(f["run_id"] for f in summary.failed))


def summary_document(summary, store: Path, force: bool) -> dict:
    """The batch summary for machines (``batch -f json``; schema ``traceanalyzer.batch``)."""
    import datetime as dt

    return {
        "schema": "traceanalyzer.batch",
        "schema_version": 1,
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "store": str(store),
        **_flags_in_errors(batch_summary(summary, force)),
    }


def _flags_in_errors(doc: dict) -> dict:
    """The failed runs' errors with the command line's flags for the arguments they name."""
    from traceanalyzer.commands.flags import as_flags

    if "failed" in doc:
        doc["failed"] = [{**f, "error": as_flags(f["error"])} if isinstance(f.get("error"), str) else f for f in doc["failed"]]
    return doc


def register(app: typer.Typer) -> None:
    app.command()(batch)
