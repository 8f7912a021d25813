"""``traceanalyzer plan``: time, energy and cost of a whole training run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.outputs import Outputs
from traceanalyzer.render.predictions import Format, emit
from traceanalyzer.errors import ConfigError
from traceanalyzer.model.runplan import PLAN_CONVENTIONS, plan_run, trace_measurement


def plan(
    tokens: Annotated[str, typer.Option("--tokens", help="Training tokens: 15T, 300B, 1.5e13.")],
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration (TOML): model size, GPU, GPU count.")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", help="Megatron-LM launch arguments or a training log that prints them.")] = None,
    trace: Annotated[Optional[list[Path]], typer.Option("--trace", "-t", help="Trace of the run (measured throughput and step-time spread; needs -c).")] = None,
    tflops: Annotated[Optional[str], typer.Option("--tflops", help="Sustained TFLOP/s per GPU under the convention; a range such as 145-155 is allowed.")] = None,
    mfu: Annotated[Optional[str], typer.Option("--mfu", help="Model FLOPs utilisation, e.g. 0.4 or 38-43%, of the GPU's dense peak.")] = None,
    params: Annotated[Optional[str], typer.Option("--params", help="Parameter count (e.g. 405B), instead of the configuration's.")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPUs of the planned run (default: the configuration's).")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="GPU model for the peak (with --mfu), e.g. 'H100 SXM'.")] = None,
    convention: Annotated[str, typer.Option("--convention", help=f"FLOPs convention: {', '.join(PLAN_CONVENTIONS)}.")] = "6nt",
    hardware_flops: Annotated[bool, typer.Option("--hardware-flops", help="The throughput counts recompute too (hardware FLOPs, e.g. Megatron-DeepSpeed's logged TFLOP/s).")] = False,
    price_per_gpu_hour: Annotated[Optional[float], typer.Option("--price-per-gpu-hour", help="Price of one GPU-hour.")] = None,
    gpu_power_w: Annotated[Optional[float], typer.Option("--gpu-power-w", help="Board power per GPU, W (energy = GPU-hours × W).")] = None,
    pue: Annotated[float, typer.Option("--pue", help="Power usage effectiveness of the data centre (energy × PUE); 1.0 = GPUs only.")] = 1.0,
    store: Annotated[Optional[Path], typer.Option("--store", help="Batch store: the step-time spread across its runs (nights) sets the jitter margin.")] = None,
    job: Annotated[Optional[str], typer.Option("--job", help="With --store: only this job's runs.")] = None,
    margin: Annotated[Optional[list[str]], typer.Option("--margin", help="Override a margin: NAME=LOW-HIGH (fractions or %), NAME one of framework, jitter, data, interruptions; repeatable.")] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
) -> None:
    """Total FLOPs, GPU-hours, wall-clock days, energy and cost of training on --tokens tokens, with margins."""
    outputs = Outputs([config, megatron_args, *(trace or []), store])
    if output is not None:
        outputs.check(output)
    from traceanalyzer.render.planning import plan_sections

    cfg = None
    if config is not None or megatron_args is not None:
        from traceanalyzer.model import load_config

        cfg = load_config(config, megatron_args)
    margins = {}
    for m in margin or []:
        name, sep, val = m.partition("=")
        if not sep or not val:
            raise ConfigError(f"--margin {m!r}: expected NAME=LOW-HIGH, e.g. jitter=5-10%")
        margins[name.strip()] = val.strip()
    measured = None
    if trace:
        if cfg is None:
            raise ConfigError("--trace needs the run configuration (-c) for the FLOPs of one step")
        from traceanalyzer.commands.common import analyse_paths

        an = analyse_paths(list(trace))
        measured = trace_measurement(cfg, an.steps, convention, "hardware" if hardware_flops else "model", params)
    run_steps = None
    if store is not None:
        from traceanalyzer.batch.trend import trend_frame

        run_steps = (trend_frame(store, "step_time", job=job)["value"] / 1e3).to_list()  # ms -> s
    p = plan_run(tokens, cfg, params=params, gpus=gpus, convention=convention, flops="hardware" if hardware_flops else "model",
                 tflops=tflops, mfu=mfu, gpu=gpu, measured=measured, price_per_gpu_hour=price_per_gpu_hour,
                 gpu_power_w=gpu_power_w, pue=pue, margins=margins,
                 run_step_times=run_steps)
    emit(plan_sections(p), format, {"plan": p}, output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(plan)
