"""``traceanalyzer plan``: time, energy and cost of a whole training run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import DocumentFormat
from traceanalyzer.render.predictions import emit
from traceanalyzer.api.commandoptions import PLAN_CONVENTIONS, check_plan_mfu, parse_count, parse_range
from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    choices, stderr_console, config_opt, format_opt, job_opt, non_negative_number,
    parsed_by, positive_number, store_opt, trace_opt,
)


def _pue(ctx, param, value):
    import math

    if value is not None and not (value >= 1 and math.isfinite(value)):
        raise typer.BadParameter(f"{value} is not a finite number >= 1")
    return value



PlanConvention = choices("PlanConvention", PLAN_CONVENTIONS)


@shared_options
def plan(
    *,
    tokens: Annotated[str, typer.Option("--tokens", metavar="COUNT", callback=parsed_by(lambda t: parse_count(t, "`tokens`")), help="Training tokens: 15T, 300B, 1.5e13.")],
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML): model size, GPU, GPU count.")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch arguments or a training log that prints them.")] = None,
    trace: Annotated[Optional[list[Path]], trace_opt("Trace of the run (measured throughput and step-time spread; needs -c); repeatable.")] = None,
    tflops: Annotated[Optional[str], typer.Option("--tflops", metavar="TFLOPS", callback=parsed_by(lambda t: parse_range(t, "`tflops`")), help="Sustained TFLOP/s per GPU under the convention; a range such as 145-155 is allowed.")] = None,
    mfu: Annotated[Optional[str], typer.Option("--mfu", metavar="FRACTION", callback=parsed_by(check_plan_mfu), help="Model FLOPs utilisation, e.g. 0.4 or 38-43%, of the GPU's dense peak.")] = None,
    params: Annotated[Optional[str], typer.Option("--params", metavar="COUNT", callback=parsed_by(lambda t: parse_count(t, "`params`")), help="Parameter count (e.g. 405B), instead of the configuration's.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", min=1, metavar="N", help="GPUs of the planned run (default: the configuration's).")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", metavar="NAME", help="GPU model for the peak (with --mfu), e.g. 'H100 SXM'.")] = None,
    convention: Annotated[PlanConvention, typer.Option("--convention", help="FLOPs convention.")] = "6nt",  # type: ignore[valid-type]
    hardware_flops: Annotated[bool, typer.Option("--hardware-flops", help="The throughput counts recompute too (hardware FLOPs, e.g. Megatron-DeepSpeed's logged TFLOP/s).")] = False,
    price_per_gpu_hour: Annotated[Optional[float], typer.Option("--price-per-gpu-hour", metavar="PRICE", callback=non_negative_number, help="Price of one GPU-hour.")] = None,
    gpu_power_w: Annotated[Optional[float], typer.Option("--gpu-power-w", metavar="WATTS", callback=positive_number, help="Board power per GPU, W (energy = GPU-hours × W).")] = None,
    pue: Annotated[float, typer.Option("--pue", metavar="PUE", callback=_pue, help="Power usage effectiveness of the data centre (energy × PUE, ≥ 1); 1.0 = GPUs only.")] = 1.0,
    store: Annotated[Optional[Path], store_opt("Batch store: the step-time spread across its runs (nights) sets the jitter margin.")] = None,
    job: Annotated[Optional[str], job_opt("With --store: only this job's runs.")] = None,
    margin: Annotated[Optional[list[str]], typer.Option("--margin", metavar="NAME=LOW-HIGH", help="Override a margin: NAME=LOW-HIGH (fractions or %), NAME one of framework, jitter, data, interruptions; repeatable.")] = None,
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output, step_range, cache, workers, quiet,
) -> None:
    """Total FLOPs, GPU-hours, wall-clock days, energy and cost of training on --tokens tokens, with margins."""
    outputs = checked_outputs([config, megatron_args, *(trace or []), store], output)
    from traceanalyzer.render.planning import plan_sections

    from traceanalyzer.api.commandline import plan_parts

    p = flagged(plan_parts(tokens, config, megatron_args, trace=trace, convention=getattr(convention, "value", convention),
                           hardware_flops=hardware_flops, params=params, store=store, job=job, margin=margin, step_range=step_range,
                           cache=cache, workers=workers, quiet=quiet, console=stderr_console, gpus=gpus, tflops=tflops, mfu=mfu, gpu=gpu,
                           price_per_gpu_hour=price_per_gpu_hour, gpu_power_w=gpu_power_w, pue=pue))
    emit(plan_sections(p), format, {"schema": "traceanalyzer.plan", "schema_version": 1, "plan": p}, output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(plan)
