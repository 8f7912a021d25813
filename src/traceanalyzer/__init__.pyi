"""For type checkers and editors: the names ``traceanalyzer/__init__.py`` loads on first use."""

from traceanalyzer._version import __version__ as __version__
from traceanalyzer.api import (
    analyze as analyze,
    annotate as annotate,
    annotations as annotations,
    baseline as baseline,
    batch as batch,
    breakdown as breakdown,
    comm as comm,
    comm_bytes as comm_bytes,
    compare as compare,
    critical_path as critical_path,
    gate as gate,
    idle as idle,
    kernel_diff as kernel_diff,
    kernels as kernels,
    launches as launches,
    load as load,
    load_analysis as load_analysis,
    memory as memory,
    ops as ops,
    plan as plan,
    predict as predict,
    queue_length as queue_length,
    rank_summary as rank_summary,
    reconcile as reconcile,
    replay as replay,
    report as report,
    scan as scan,
    search_layouts as search_layouts,
    select as select,
    straggler_costs as straggler_costs,
    straggler_view as straggler_view,
    stragglers as stragglers,
    trend as trend,
    wait_matrix as wait_matrix,
    whatif as whatif,
)
from traceanalyzer.reconciliation.footprint import MemoryResult as MemoryResult
from traceanalyzer.results import (
    Analysis as Analysis,
    BatchSummary as BatchSummary,
    CriticalPath as CriticalPath,
    PlanResult as PlanResult,
    PredictResult as PredictResult,
    ReconcileResult as ReconcileResult,
    ReportModel as ReportModel,
    StragglerView as StragglerView,
)
from traceanalyzer.schema import Trace as Trace

_API: dict[str, str]
__all__: list[str]
