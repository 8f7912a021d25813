"""What the layers hand each other: the classified job (:class:`Analysis`), the critical path
(:class:`CriticalPath`) and the verbs' result objects (:class:`StragglerView`,
:class:`ReportModel`, :class:`ReconcileResult`, :class:`PredictResult`, :class:`PlanResult`,
:class:`BatchSummary`: frozen and typed, ``to_dict()`` the document). Plain containers, in the
ground so that every layer, the renderers included, can name them without importing the layer
that fills them.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field, fields
from types import FrameType
from typing import Any, NamedTuple, TypeVar, cast

import polars as pl

from traceanalyzer.buckets import BUCKETS, COMM_DIM_FIELDS, FIELDS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.schema import Trace

__all__ = ["Analysis", "CriticalPath", "StragglerView", "ReportModel", "ReconcileResult", "PredictResult", "PlanResult",
           "BatchSummary"]


@dataclass
class Analysis:
    """The classified trace: per-step partition plus the frames it was computed from."""

    trace: Trace  # the trace analysed (its events are empty when a command's workers kept only tables)
    steps: pl.DataFrame  # rank, step, start_*, duration_*, <bucket>_ns/_us, overlapped_comm_*, idle_<cause>_*, exposed_comm_<dim>_*
    gpu: pl.DataFrame  # GPU work events with their class (cls)
    windows: pl.DataFrame  # rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns
    warnings: list[str] = field(default_factory=list)  # the trace's and the classifiers' warnings
    recompute_ops: pl.DataFrame | None = None  # recomputed host ops (classify.recompute.recompute_ops)
    recomputed_by_name: pl.DataFrame | None = None  # rank, name, count, gpu_ns (top-level recomputed ops)
    collectives: pl.DataFrame | None = None  # one row per communication kernel (classify.comm.collectives); its text columns (name, coll_type, pg_name, pg_desc, pg_ranks, dim) are pl.Categorical
    comm: pl.DataFrame | None = None  # rank, step, by (type/group/dim), key, count, bytes, time/wait/transfer/exposed/overlapped ns
    cross_rank: pl.DataFrame | None = None  # per step over ranks: slowest rank, skew, straggler bucket
    replay_points: pl.DataFrame | None = None  # per rank: step starts/ends and collective arrivals with their anchor and lead (classify.replaypoints.rank_points)
    replay: pl.DataFrame | None = None  # rank, step, measured_ms, replayed_ms: the cross-rank replay of the measured job (classify.replay.replay_table); None when no rank waits on another
    outside_steps: pl.DataFrame | None = None  # rank, outside_ns, before_ns, after_ns: GPU busy time in no step
    kernel_rows: pl.DataFrame | None = None  # per rank and kernel: calls, total_ns (classify.kernels.kernel_rows)
    exposed_kernels: pl.DataFrame | None = None  # comm kernels with exposed time (classify.kernels.exposed_rows)
    kernel_stats: pl.DataFrame | None = None  # per rank, step, kernel (classify.kernelstats.kernel_stat_rows)
    op_stats: pl.DataFrame | None = None  # per rank, step, host op and shapes (classify.opstats.op_stat_rows)
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)  # optional tables asked for (engine.rank.TABLES)
    profiler_options: dict[str, list[str]] | None = None  # per file of the job (trace.meta's ``file``): the profiler options its header lists (the engine reads them); None: not known
    options: Any = None  # the options it was made with (step range, patterns, optional tables): a verb that needs another table builds it with these
    _cross_rank_view: Any = field(default=None, init=False, repr=False, compare=False)  # straggler_view's, computed on first use

    def __repr__(self) -> str:
        """A few lines: ranks, steps, events, mean step time and its partition (never the frames)."""
        st = self.steps
        ranks = st.get_column("rank").n_unique() if st.height else 0
        steps = st.get_column("step").n_unique() if st.height else 0
        head = f"<Analysis {ranks} rank{'s' if ranks != 1 else ''} x {steps} step{'s' if steps != 1 else ''} ({st.height} rank-step{'s' if st.height != 1 else ''})"
        if not st.height:
            return head + ">"
        total = int(st.get_column("duration_ns").sum())
        lo, hi = st.select(pl.col("start_ns").min().alias("lo"), (pl.col("start_ns") + pl.col("duration_ns")).max().alias("hi")).row(0)
        parts = ", ".join(f"{b} {100 * int(st.get_column(f'{b}_ns').sum()) / total:.1f}%" for b in BUCKETS) if total else ""
        return (f"{head}, {self.trace.events.height:,} events, span {(hi - lo) / 1e6:.3f} ms\n"
                f"  mean step {total / st.height / 1e6:.3f} ms: {parts}"
                f"{f'; {len(self.warnings)} warnings' if self.warnings else ''}>")

    def straggler_view(self) -> dict[str, Any]:
        """What each straggler costs the job (:func:`traceanalyzer.classify.stragglercost.job_view`
        at the default tolerance): ``costs`` (one row per rank, phase and collective, most costly
        first: its first row is the top straggler), ``ranks`` (made others wait / waited),
        ``replay``, ``wait_matrix``, ``total_cost_ms_per_step``, ``warnings``. Computed on first
        use (a replay per rank and phase), then kept; a copy made by ``dataclasses.replace``
        (a selection) computes its own."""
        if self._cross_rank_view is None:
            # the classifiers compute it; this ground module names them only by string (an import
            # here would make every layer that names the type import classify)
            import importlib

            cost = importlib.import_module("traceanalyzer.classify.stragglercost")
            tolerance = importlib.import_module("traceanalyzer.classify.stragglers").DEFAULT_TOLERANCE
            self._cross_rank_view = cost.job_view(self, tolerance)
        return cast("dict[str, Any]", self._cross_rank_view)

    def save(self, path: str | Any) -> Any:
        """Write this analysis to one file (``.taz``: a ZIP of Parquet frames and a JSON header
        with the options it was made with and its trace files' fingerprints), whole or not at
        all and never over one of its trace files; ``traceanalyzer.load_analysis(path)`` reads
        it back, and every verb and command that takes a trace takes that file. Returns the
        path written (a :class:`~pathlib.Path`).

        Raises:
            OutputError: ``path`` is a trace file of the analysis, a directory, or cannot be
                written.
        """
        # the writer is in a layer above (it fingerprints the inputs with the parse cache): this
        # ground module names it only by string, as straggler_view does the classifiers
        import importlib

        return importlib.import_module("traceanalyzer.analysisfile").write(self, path)

    def _fields(self) -> list[str]:
        return [f for f in [*FIELDS, *IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS] if f"{f}_ns" in self.steps.columns]

    def totals(self) -> pl.DataFrame:
        """Per rank: ``rank``, ``steps`` (UInt32) and every field of :attr:`steps` summed over the
        rank's steps (``<field>_ns`` Int64, ``<field>_us`` Float64), sorted by rank."""
        return (
            self.steps.group_by("rank")
            .agg(pl.len().alias("steps"), *[pl.col(f"{f}_ns").sum() for f in self._fields()])
            .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in self._fields()])
            .sort("rank")
        )


class CriticalPath(NamedTuple):
    """What :func:`traceanalyzer.critical_path` returns: two polars frames (and the warnings)."""

    summary: pl.DataFrame
    segments: pl.DataFrame
    warnings: list[str]
    host_gaps: bool = True  # host time outside every op weighed as the host's (critical_path's host_gaps)


# ---------------------------------------------------------------------------------------------
# What the verbs that return a document return: a frozen, typed view of the document, whose
# ``to_dict()`` is the document itself (what ``-f json`` writes, and what these verbs returned as a
# plain ``dict`` before 0.1.0).

#: a document: the JSON object a command writes with ``-f json`` (nested values are JSON values,
#: or polars frames in :class:`StragglerView`)
Document = dict[str, object]

#: the version from which these verbs return a result object (indexing it as a dict still works,
#: with a DeprecationWarning)
RESULTS_IN = "0.1.0"


_R = TypeVar("_R", bound="_DocumentResult")


def _deprecated_use(result: _DocumentResult, use: str, key: object = None) -> None:
    """The DeprecationWarning of a result used as the ``dict`` it was (``use``: what was done,
    ``key``: the key asked for), at the caller's line: the first frame outside this module and
    ``collections.abc`` (whose mixins, ``get``, ``keys``, call back), as the API's
    ``renamed_parameter`` finds it."""
    import sys
    import warnings

    level = 3  # warn's 1: this function; 2: the dunder; 3: its caller
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename == __file__ or "_collections_abc" in frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    name = type(result).__name__
    attrs = {f.name for f in fields(result)}  # type: ignore[arg-type]
    how = f".{key}" if isinstance(key, str) and key in attrs and not key.startswith("_") else ".to_dict()"
    warnings.warn(f"{use} a {name} as a dict is deprecated: since traceanalyzer {RESULTS_IN} the verb returns a {name}; use {how}",
                  DeprecationWarning, stacklevel=level)


class _DocumentResult(Mapping[str, object]):
    """The shared part of the result objects: ``to_dict()`` (the document, a new ``dict`` each
    call), and the read-only ``Mapping`` of the ``dict`` these verbs returned before (``r["key"]``,
    ``"key" in r``, ``r.get``, ``r.keys()``, ``dict(r)``), each use of which warns
    (DeprecationWarning). ``json.dumps(r)`` and ``isinstance(r, dict)`` need ``r.to_dict()``."""

    _document: Document

    def to_dict(self) -> Document:
        """The document as a ``dict`` (what ``-f json`` writes; the verb's return value before 0.1.0)."""
        return dict(self._document)

    def __getitem__(self, key: str) -> object:
        _deprecated_use(self, f"indexing [{key!r}] of", key)
        return self._document[key]

    def __iter__(self) -> Iterator[str]:
        _deprecated_use(self, "iterating")
        return iter(self._document)

    def __len__(self) -> int:
        return len(self._document)

    def __contains__(self, key: object) -> bool:
        _deprecated_use(self, f"testing {key!r} in", key)
        return key in self._document

    # Mapping's own would go through __getitem__, one warning per key
    def keys(self) -> KeysView[str]:
        _deprecated_use(self, "calling keys() of")
        return self._document.keys()

    def values(self) -> ValuesView[object]:
        _deprecated_use(self, "calling values() of")
        return self._document.values()

    def items(self) -> ItemsView[str, object]:
        _deprecated_use(self, "calling items() of")
        return self._document.items()

    def get(self, key: str, default: object = None) -> object:
        _deprecated_use(self, f"get({key!r}) of", key)
        return self._document.get(key, default)

    # identity, as for any object (Mapping's would compare the documents, frames included)
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @classmethod
    def from_dict(cls: type[_R], document: Document) -> _R:
        """The result of a document (``to_dict()``'s, or the command's ``-f json`` read back):
        its typed fields read off it (a key it lacks: None); the document is kept as it is."""
        names = [f.name for f in fields(cls) if f.init and f.name != "_document"]  # type: ignore[arg-type]
        return cls(**{n: document.get(n) for n in names}, _document=document)  # type: ignore[call-arg]


@dataclass(frozen=True, eq=False, kw_only=True)
class StragglerView(_DocumentResult):
    """What :func:`traceanalyzer.straggler_view` returns: everything the ``stragglers`` command shows."""

    ranks: pl.DataFrame  # per rank: stragglers' columns, made_wait/waited ms per step, role, its most costly phase
    costs: pl.DataFrame  # straggler_costs: one row per rank, phase and collective, most costly first
    total_cost_ms_per_step: float  # every rank made typical at once
    replay: pl.DataFrame  # the replay of the measured job (traceanalyzer.replay)
    wait_matrix: pl.DataFrame  # who waited on whom (traceanalyzer.wait_matrix)
    warnings: list[str]  # the view's warnings
    _document: Document = field(repr=False)


@dataclass(frozen=True, eq=False, kw_only=True)
class ReportModel(_DocumentResult):
    """What :func:`traceanalyzer.report` returns: the report model, every number a report shows
    (the document ``traceanalyzer report -f json`` writes; ``docs/report-schema.md``)."""

    schema: str  # "traceanalyzer.report"
    schema_version: int  # 1
    headline: dict[str, object]  # step_ms, ranks, slowest_rank, ...
    ranks: list[dict[str, object]]  # one entry per rank
    rank_summary: list[dict[str, object]] | None  # rank_summary's rows in ms; None when every rank is listed
    stragglers: dict[str, object]  # the ranks slow on some steps, and why
    steps: list[dict[str, object]]  # one entry per rank and step
    timeline: dict[str, object]  # the shown rank's per-step timeline
    more_timelines: list[dict[str, object]]  # up to 7 more ranks' timelines
    findings: list[dict[str, object]]  # the largest losses, what causes them, what to change
    waterfall: dict[str, object] | None  # with a run configuration
    top_kernels: list[dict[str, object]]  # the kernels with the most GPU time
    top_exposed_collectives: list[dict[str, object]]  # the collectives with the most exposed time
    warnings: list[str]  # the analysis' and the report's
    _document: Document = field(repr=False)


@dataclass(frozen=True, eq=False, kw_only=True)
class ReconcileResult(_DocumentResult):
    """What :func:`traceanalyzer.reconcile` returns: the waterfall from peak to achieved TFLOP/s
    per GPU (the document ``traceanalyzer reconcile -f json`` writes)."""

    schema: str  # "traceanalyzer.reconcile"
    schema_version: int  # 1
    peak_tflops: float  # the GPU's peak TFLOP/s (mfu_denominator in to_dict() says which)
    achieved_tflops: float  # model FLOPs per GPU and step / the measured step time
    mfu: float | None  # achieved / peak
    hfu: float | None  # hardware FLOPs / peak (hfu_convention in to_dict() says how recompute counts)
    step_time_s: float  # the mean measured step
    terms: list[dict[str, object]]  # each loss in TFLOP/s and % of peak, measured beside predicted
    warnings: list[str]  # what the waterfall could not measure or price
    _document: Document = field(repr=False)


@dataclass(frozen=True, eq=False, kw_only=True)
class PredictResult(_DocumentResult):
    """What :func:`traceanalyzer.predict` returns (the document ``traceanalyzer predict -f json`` writes)."""

    schema: str  # "traceanalyzer.predict"
    schema_version: int  # 1
    prediction: dict[str, object]  # the prediction of the configuration (at the first global batch of a sweep)
    memory: dict[str, object] | None  # memory per GPU by component; None when the configuration cannot say
    warnings: list[str]  # the predictions' and the memory model's
    sweep: list[dict[str, object]] | None = None  # with several global batches: one prediction each
    global_batch_known: bool | None = None  # with a sweep: False when it is the spread of an unknown batch
    vs: dict[str, object] | None = None  # with vs: the reference's prediction
    comparison: dict[str, object] | list[dict[str, object]] | None = None  # with vs: the gap split into causes
    _document: Document = field(repr=False)


@dataclass(frozen=True, eq=False, kw_only=True)
class PlanResult(_DocumentResult):
    """What :func:`traceanalyzer.plan` returns (the document ``traceanalyzer plan -f json``
    writes); each range-valued figure is ``{"low", "expected", "high"}``."""

    total_flops: float  # FLOPs per token x tokens
    flops_per_token: float  # as the convention counts them
    gpu_hours: dict[str, float]  # GPU time with the margins
    wall_clock_days: dict[str, float] | None  # None without a GPU count
    energy_mwh: dict[str, float] | None  # None without a GPU power
    cost: dict[str, float] | None  # None without a price
    margins: dict[str, object]  # each margin's low and high fraction, and where it comes from
    notes: list[str]  # what was left out, and why
    _document: Document = field(repr=False)


@dataclass(frozen=True, eq=False, kw_only=True)
class BatchSummary(_DocumentResult):
    """What :func:`traceanalyzer.batch` returns (``traceanalyzer batch -f json``'s document
    without its store and time stamp)."""

    force: bool  # runs already stored were analysed again
    runs: int  # runs found under the roots
    analysed: list[str]  # run ids analysed and stored
    reanalysed: list[str]  # of those, the ones that replaced stored rows
    skipped: list[str]  # already stored on the very same inputs
    failed: list[dict[str, object]]  # run_id, error, exit_code, error_class
    cache_hits: int  # parse-cache hits
    warnings: dict[str, list[str]]  # per run
    ok: bool  # no run failed
    _document: Document = field(repr=False)
