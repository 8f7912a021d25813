"""traceanalyzer: where did my MFU go?

Python API (reference: ``docs/api.md``; tutorial: ``docs/tutorial.md``)::

    import traceanalyzer as ta
    a = ta.analyze("runs/2026-11-20/")    # load and classify every rank file of a job
    ta.breakdown(a)                       # per rank and step: compute / recompute / exposed comm / other / idle
    ta.stragglers(a)                      # which ranks are slow, on how many steps, in which bucket
    ta.compare(a, ta.analyze("runs/2026-11-21/"))   # the step-time gap, split exactly by bucket

Every verb takes a path, a :class:`Trace` (``ta.load``) or an :class:`Analysis` (``ta.analyze``)
and returns a polars DataFrame, or a frozen, typed result object (``straggler_view``, ``report``,
``reconcile``, ``predict``, ``plan``, ``batch``, ``critical_path``, ``memory``; the document ones
have ``to_dict()``, the document ``-f json`` writes). ``docs/api.md`` lists what each returns.
"""

from __future__ import annotations

# the future import binds the name ``annotations`` in this module; the verb of that name
# (``ta.annotations``) must come from the registry below
del annotations

from traceanalyzer._version import __version__
from traceanalyzer.lazy import lazy_attributes

#: The public API: name -> "module:attribute", imported on first use (so ``import traceanalyzer``
#: loads no polars, and the command line can handle a signal before the heavy libraries load).
#: One line per verb; the API reference (``docs/api.md``) lists them in this order.
_API: dict[str, str] = {
    "load": "traceanalyzer.api:load",
    "scan": "traceanalyzer.api:scan",
    "analyze": "traceanalyzer.api:analyze",
    "load_analysis": "traceanalyzer.api:load_analysis",
    "select": "traceanalyzer.api:select",
    "breakdown": "traceanalyzer.api:breakdown",
    "rank_summary": "traceanalyzer.api:rank_summary",
    "comm": "traceanalyzer.api:comm",
    "idle": "traceanalyzer.api:idle",
    "stragglers": "traceanalyzer.api:stragglers",
    "straggler_view": "traceanalyzer.api:straggler_view",
    "straggler_costs": "traceanalyzer.api:straggler_costs",
    "replay": "traceanalyzer.api:replay",
    "wait_matrix": "traceanalyzer.api:wait_matrix",
    "comm_bytes": "traceanalyzer.api:comm_bytes",
    "compare": "traceanalyzer.api:compare",
    "kernel_diff": "traceanalyzer.api:kernel_diff",
    "report": "traceanalyzer.api:report",
    "kernels": "traceanalyzer.api:kernels",
    "ops": "traceanalyzer.api:ops",
    "annotations": "traceanalyzer.api:annotations",
    "launches": "traceanalyzer.api:launches",
    "queue_length": "traceanalyzer.api:queue_length",
    "critical_path": "traceanalyzer.api:critical_path",
    "reconcile": "traceanalyzer.api:reconcile",
    "memory": "traceanalyzer.api:memory",
    "whatif": "traceanalyzer.api:whatif",
    "search_layouts": "traceanalyzer.api:search_layouts",
    "predict": "traceanalyzer.api:predict",
    "plan": "traceanalyzer.api:plan",
    "annotate": "traceanalyzer.api:annotate",
    "baseline": "traceanalyzer.api:baseline",
    "batch": "traceanalyzer.api:batch",
    "trend": "traceanalyzer.api:trend",
    "gate": "traceanalyzer.api:gate",
    "Trace": "traceanalyzer.schema:Trace",
    "Analysis": "traceanalyzer.results:Analysis",
    "CriticalPath": "traceanalyzer.results:CriticalPath",
    "StragglerView": "traceanalyzer.results:StragglerView",
    "ReportModel": "traceanalyzer.results:ReportModel",
    "ReconcileResult": "traceanalyzer.results:ReconcileResult",
    "PredictResult": "traceanalyzer.results:PredictResult",
    "PlanResult": "traceanalyzer.results:PlanResult",
    "BatchSummary": "traceanalyzer.results:BatchSummary",
    "MemoryResult": "traceanalyzer.reconciliation.footprint:MemoryResult",
}

__all__ = [*_API, "__version__"]

# the verbs and types, imported on first use (no sub-package is named like one of them)
__getattr__, __dir__ = lazy_attributes(__name__, _API)
