"""``traceanalyzer predict``: analytic-only what-if for a run configuration (no trace)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from traceanalyzer.errors import ConfigError
from traceanalyzer.model import compare_predictions, load_config, predict as predict_run
from traceanalyzer.model.config import CONVENTIONS
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.model import Section, comparison_sections, num, prediction_sections, render


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def emit(sections: list[Section], fmt: Format, doc: dict[str, Any], output: Path | None, outputs: Outputs | None = None) -> None:
    """Write sections as a rich table / markdown, or ``doc`` as JSON, to stdout or ``output``
    (through ``outputs``, which knows the command's inputs: never over one of them)."""
    from rich.console import Console

    outputs = outputs or Outputs()
    with outputs.stream(output, "w") as fh:
        if fmt is Format.table:  # render() escapes user text: markup stays on
            width = 160 if output is not None else (None if sys.stdout.isatty() else 140)
            render(sections, "table", console=Console(file=fh, width=width, highlight=False))
        else:
            fh.write(render(sections, fmt.value, doc=doc))


def predict(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration (TOML).")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", help="Megatron-LM launch arguments or a training log that prints them.")] = None,
    vs: Annotated[Optional[Path], typer.Option("--vs", help="Reference configuration (TOML) to compare with; its [reported] throughput sets the kernel efficiency.")] = None,
    global_batch: Annotated[Optional[list[int]], typer.Option("--global-batch", help="Override the global batch; repeat for a sweep.")] = None,
    convention: Annotated[Optional[str], typer.Option("--convention", help=f"FLOPs convention: {', '.join(CONVENTIONS)}.")] = None,
    kernel_efficiency: Annotated[Optional[float], typer.Option("--kernel-efficiency", help="Fraction of peak reached by compute kernels (default: implied by [reported], the --vs run, else 1.0).")] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
) -> None:
    """Predict FLOPs, bubble, recompute and communication of a run; with --vs, split the gap into causes."""
    if convention is not None and convention not in CONVENTIONS:
        raise ConfigError(f"--convention {convention!r} is not one of {', '.join(CONVENTIONS)}")
    outputs = Outputs([config, megatron_args, vs])
    if output is not None:
        outputs.check(output)
    cfg = load_config(config, megatron_args)
    ref = ref_pred = None
    if vs is not None:
        ref = load_config(vs)
        ref_pred = predict_run(ref, convention=convention)
        convention = ref_pred["convention"]
        if kernel_efficiency is None:
            kernel_efficiency = ref_pred["kernel_efficiency"]
    batches = global_batch or [None]
    preds = [predict_run(cfg, convention=convention, kernel_efficiency=kernel_efficiency, global_batch=g) for g in batches]
    sections = prediction_sections(preds[0])
    doc: dict[str, Any] = {"prediction": preds[0]}
    if len(preds) > 1:
        sweep = Section(f"Sweep over the global batch [{preds[0]['convention']}]",
                        ["global batch", "microbatches", "bubble", "step s", "TFLOP/s/GPU", "MFU"])
        for p in preds:
            sweep.rows.append([str(p["layout"]["global_batch"]), str(p["layout"]["microbatches"]), f"{p['bubble_fraction']:.3f}",
                               num(p["step_time_s"], 3), num(p["tflops_per_gpu"]), f"{100 * p['mfu']:.1f} %"])
        sections.append(sweep)
        doc["sweep"] = preds
    if ref_pred is not None:
        sections += prediction_sections(ref_pred)
        cmps = [compare_predictions(p, ref_pred) for p in preds]
        for c in cmps:
            sections += comparison_sections(c)
        doc["vs"] = ref_pred
        doc["comparison"] = cmps[0] if len(cmps) == 1 else cmps
    emit(sections, format, doc, output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(predict)
