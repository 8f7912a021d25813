"""The Python API: verbs that take a trace (a path, a :class:`~traceanalyzer.schema.Trace` or an
:class:`~traceanalyzer.classify.Analysis`) and return polars frames, or the frozen result
objects of :mod:`traceanalyzer.results` (each verb's return annotation says which).

Every verb is re-exported at the top level (``import traceanalyzer as ta; ta.breakdown(...)``)
and documented in ``docs/api.md``, which ``scripts/gen_api_docs.py`` generates from the
docstrings of the family modules this package re-exports (one module per family of verbs:
``loading``, ``partition``, ``tables``, ``timeline``, ``modelling``, ``layouts``, ``documents``,
``nightly``). Conventions shared by every frame:

* times are integer nanoseconds in ``*_ns`` columns (exact; a partition sums exactly) and, where
  a column is a mean or a median, Float64 nanoseconds; ``*_us`` columns are ``*_ns / 1000``;
* ``rank`` is the global rank (Int32), ``step`` the step number (Int64, ``N`` of
  ``ProfilerStep#N``; 0 when the whole trace is one step);
* the buckets ``compute``, ``recompute``, ``exposed_comm``, ``other`` and ``idle`` partition each
  step exactly; ``overlapped_comm`` is reported beside them.

Errors are :class:`traceanalyzer.errors.TraceAnalyzerError` subclasses, the same ones the
command line turns into its documented exit codes.
"""


from traceanalyzer.api.crossrank import comm_bytes, replay, straggler_costs, straggler_view, wait_matrix
from traceanalyzer.api.documents import compare, kernel_diff, report
from traceanalyzer.api.layouts import plan, search_layouts
from traceanalyzer.api.loading import analyze, load, load_analysis, scan, select
from traceanalyzer.api.modelling import baseline, memory, predict, reconcile, whatif
from traceanalyzer.api.nightly import batch, gate, trend
from traceanalyzer.api.partition import breakdown, comm, idle, rank_summary, stragglers
from traceanalyzer.api.tables import annotations, kernels, launches, ops, queue_length
from traceanalyzer.api.timeline import annotate, critical_path

__all__ = [
    "load", "scan", "analyze", "load_analysis", "select", "breakdown", "rank_summary", "comm", "idle", "stragglers", "compare", "report",
    "kernels", "ops", "kernel_diff", "annotations", "launches", "queue_length", "critical_path", "reconcile", "memory", "whatif",
    "search_layouts", "predict", "plan", "annotate", "baseline", "batch", "trend", "gate",
    "straggler_view", "straggler_costs", "replay", "wait_matrix", "comm_bytes",
]
