"""The one place where what the layers below the command line say about a Python argument is
said with the command line's flag: they name it in backquotes (``'step_range' 'Step' matches no range``,
with backquotes for the quotes), the command line prints the flag (``--step-range 'Step' matches no range``)."""

from __future__ import annotations

#: the command line's flag for each Python argument (or phrase) the layers below it name in a
#: message, in backquotes (``step_range`` between two backquotes): the one table that maps them
_FLAGS = {
    "`step_range=None`": "--whole-trace", "(`config`)": "(-c)", "`output`": "-o", "`comm_kernels`": "--comm-kernel",
    "`sets`": "--set", "`margins`": "--margin", "`reserve_gib`": "--reserve", "`n_gpus`": "--gpus",
    **{f"`{name}`": "--" + name.replace("_", "-") for name in (
        "step_range", "address", "engine", "search", "name", "sort", "precision", "top", "merge", "rank", "config", "topo",
        "trace", "tokens", "step", "params", "gpus", "recompute_range", "global_batch", "pue", "gpu_power_w", "price_per_gpu_hour", "tflops", "mfu", "margin", "convention",
        "capacity_gb", "reserve_gb", "since", "max_regression", "last", "whole_trace")},
}


def as_flags(message: str) -> str:
    """``message`` with the Python arguments it names in backquotes (the name between two backquotes,
    as the layers below the command line say them) named as the flags of
    the command line (``--step-range 'Step' matches no range``)."""
    if "`" in message:
        for phrase, flag in _FLAGS.items():
            message = message.replace(phrase, flag)
    return message
