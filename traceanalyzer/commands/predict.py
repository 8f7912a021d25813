"""``traceanalyzer predict``: analytic-only what-if for a run configuration (no trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from traceanalyzer.commands.common import AllRowsOpt, ConfigOpt, OutputOpt, choices, format_opt, fraction, print_warnings
from traceanalyzer.model import compare_predictions, load_config, predict as predict_run
from traceanalyzer.model.config import CONVENTIONS
from traceanalyzer.model.flops import HFU_CONVENTIONS
from traceanalyzer.render.predictions import Format, comparison_sections, emit, prediction_sections, sweep_section

#: microbatches per pipeline shown when the global batch is unknown: the spread of the verdict
SPREAD_MICROBATCHES = (1, 2, 4, 8, 16, 32)
from traceanalyzer.outputs import Outputs


Convention = choices("Convention", CONVENTIONS)
HfuConvention = choices("HfuConvention", HFU_CONVENTIONS)


def predict(
    config: ConfigOpt = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch script, arguments or a training log.")] = None,
    vs: Annotated[Optional[Path], typer.Option("--vs", metavar="CONFIG", help="Reference configuration (TOML) to compare with; its [reported] throughput sets the kernel efficiency.")] = None,
    global_batch: Annotated[Optional[list[int]], typer.Option("--global-batch", min=1, metavar="N", help="Override the global batch; repeat for a sweep.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configuration's).")] = None,  # type: ignore[valid-type]
    hfu: Annotated[HfuConvention, typer.Option("--hfu", help="How recompute counts in HFU.")] = "forward",  # type: ignore[valid-type]
    kernel_efficiency: Annotated[Optional[float], typer.Option("--kernel-efficiency", metavar="FRACTION", callback=fraction, help="Fraction of peak reached by compute kernels, in (0, 1] (default: implied by [reported], the --vs run, else 1.0).")] = None,
    format: Annotated[Format, format_opt()] = Format.table,
    output: OutputOpt = None,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output: bandwidth by message size instead of the hardware table's; repeatable.")] = None,
    all_rows: AllRowsOpt = False,
) -> None:
    """Predict FLOPs, bubble, recompute and communication of a run; with --vs, split the gap into causes."""
    convention = getattr(convention, "value", convention)
    hfu = getattr(hfu, "value", hfu)
    outputs = Outputs([config, megatron_args, vs])
    if output is not None:
        outputs.check(output)
    cfg = load_config(config, megatron_args)
    base = None
    if baseline:
        import polars as pl

        from traceanalyzer.baselines import read_nccl_tests

        base = pl.concat([read_nccl_tests(f) for f in baseline])
    warnings: list[str] = []
    ref = ref_pred = None
    if vs is not None:
        ref = load_config(vs)
        ref_pred = predict_run(ref, convention=convention, hfu=hfu)
        convention = ref_pred["convention"]
        if kernel_efficiency is None:
            kernel_efficiency = ref_pred["kernel_efficiency"]
    batches: list[int | None] = list(global_batch or [None])
    spread = False
    if not global_batch and cfg.batch.global_batch is None and cfg.dp is not None:
        # the verdict depends on an unknown: show its spread instead of one number
        unit = cfg.dp * cfg.batch.micro_batch
        batches = [unit * m for m in SPREAD_MICROBATCHES]
        spread = True
        warnings.append(f"the global batch is unknown: the prediction is shown for {len(batches)} global batches "
                        f"({batches[0]}–{batches[-1]}); give [batch] global_batch or --global-batch for one answer")
    preds = [predict_run(cfg, convention=convention, kernel_efficiency=kernel_efficiency, global_batch=g, hfu=hfu,
                         baseline=base)
             for g in batches]
    sections = prediction_sections(preds[0], all_rows)
    doc: dict[str, Any] = {"schema": "traceanalyzer.predict", "schema_version": 1, "prediction": preds[0]}
    if len(preds) > 1:
        title = (f"Global batch unknown: the spread [{preds[0]['convention']}]" if spread else None)
        sections.append(sweep_section(preds, title))
        doc["sweep"] = preds
        doc["global_batch_known"] = not spread
    if ref_pred is not None:
        sections += prediction_sections(ref_pred, all_rows)
        cmps = [compare_predictions(p, ref_pred) for p in preds]
        for c in cmps:
            sections += comparison_sections(c)
        doc["vs"] = ref_pred
        doc["comparison"] = cmps[0] if len(cmps) == 1 else cmps
    doc["memory"] = _memory(cfg, sections, warnings)
    warnings += [w for p in preds + ([ref_pred] if ref_pred else []) for w in p["warnings"]]
    warnings = list(dict.fromkeys(warnings))
    doc["warnings"] = warnings
    emit(sections, format, doc, output, outputs)
    print_warnings(warnings)


def _memory(cfg, sections: list, warnings: list[str]) -> dict[str, Any] | None:
    """Memory per GPU by component (:func:`traceanalyzer.model.memory.estimate_memory`): its
    section is added to ``sections``; None (with a warning) when the configuration cannot say."""
    from traceanalyzer.model.memory import estimate_memory
    from traceanalyzer.render.memory import estimate_sections

    try:
        est = estimate_memory(cfg)
    except ConfigError as exc:
        warnings.append(f"memory per GPU not estimated: {exc.message}")
        return None
    doc = est.as_dict()
    sections += estimate_sections(est, doc)
    return doc


def register(app: typer.Typer) -> None:
    app.command()(predict)
