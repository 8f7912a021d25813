"""traceanalyzer: where did my MFU go?

Python API::

    import traceanalyzer as ta
    trace = ta.load("runs/2026-11-20/")   # canonical polars frames (trace.events, trace.meta)
    df = ta.breakdown(trace)              # per-rank, per-step partition of GPU time
    p = ta.plan("15T", params="405B", mfu="38-43%", gpu="H100 SXM", gpus=16384)  # time and cost of a run
"""

__version__ = "0.1.0"

__all__ = ["load", "breakdown", "analyze", "plan", "Trace", "__version__"]

_LAZY = {"analyze": "traceanalyzer.engine", "breakdown": "traceanalyzer.engine",
         "load": "traceanalyzer.parsers", "Trace": "traceanalyzer.schema",
         "plan": ("traceanalyzer.model.runplan", "plan_run")}


def __getattr__(name: str):
    """The API is imported on first use, so the command line can handle a signal before the heavy
    libraries (polars) load."""
    if name in _LAZY:
        import importlib

        where = _LAZY[name]
        module, attr = where if isinstance(where, tuple) else (where, name)
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'traceanalyzer' has no attribute {name!r}")
