"""traceanalyzer: where did my MFU go?

Python API::

    import traceanalyzer as ta
    trace = ta.load("runs/2026-11-20/")   # canonical polars frames (trace.events, trace.meta)
    df = ta.breakdown(trace)              # per-rank, per-step partition of GPU time
"""

__version__ = "0.1.0"

__all__ = ["load", "breakdown", "analyze", "Trace", "__version__"]

_LAZY = {"analyze": "traceanalyzer.classify", "breakdown": "traceanalyzer.classify",
         "load": "traceanalyzer.parsers", "Trace": "traceanalyzer.schema"}


def __getattr__(name: str):
    """The API is imported on first use, so the command line can handle a signal before the heavy
    libraries (polars) load."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'traceanalyzer' has no attribute {name!r}")
