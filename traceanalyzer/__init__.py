"""traceanalyzer: where did my MFU go?

Python API::

    import traceanalyzer as ta
    trace = ta.load("runs/2026-11-20/")   # canonical polars frames (trace.events, trace.meta)
    df = ta.breakdown(trace)              # per-rank, per-step partition of GPU time
    p = ta.plan("15T", params="405B", mfu="38-43%", gpu="H100 SXM", gpus=16384)  # time and cost of a run
"""

__version__ = "0.1.0"

from traceanalyzer.classify import analyze, breakdown  # noqa: E402
from traceanalyzer.model.runplan import plan_run as plan  # noqa: E402
from traceanalyzer.parsers import load  # noqa: E402
from traceanalyzer.schema import Trace  # noqa: E402

__all__ = ["load", "breakdown", "analyze", "plan", "Trace", "__version__"]
