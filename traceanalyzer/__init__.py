"""traceanalyzer: where did my MFU go?

Python API::

    import traceanalyzer as ta
    trace = ta.load("runs/2026-11-20/")   # canonical polars frames (trace.events, trace.meta)
    df = ta.breakdown(trace)              # per-rank, per-step partition of GPU time
"""

__version__ = "0.1.0"

from traceanalyzer.classify import analyze, breakdown  # noqa: E402
from traceanalyzer.parsers import load  # noqa: E402
from traceanalyzer.schema import Trace  # noqa: E402

__all__ = ["load", "breakdown", "analyze", "Trace", "__version__"]
