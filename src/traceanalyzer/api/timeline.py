"""The timeline: the critical path of each step, and the trace written back with its classification.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any


from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import PathLike, Source, _path
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import analyze, resolve
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.results import CriticalPath


@renamed_parameter("analysis", "source", version=RENAMED_IN, old_wins=True)
@renamed_parameter("trace", "source", version=RENAMED_IN)
@renamed_parameter("step_name", "step_range", version=RENAMED_IN)
@checked
def critical_path(
    source: Source | None = None,
    step: int | None = None,
    rank: int | None = None,
    *,
    step_range: str | None = DEFAULT_STEP,
    infer_waits: bool = True,
    wait_slack_ns: int = 10_000,  # classify.critical_path.WAIT_SLACK_NS
    host_gaps: bool = True,
    workers: int | None = None,
) -> CriticalPath:
    """The critical path of every step (or of one): what the step waited on, piece by piece.

    The path is the longest path through the step's dependency graph: host threads (CPU ops,
    ``record_function`` ranges, runtime calls, and the time between them), GPU streams
    (kernels, memcpy, memset in stream order), launch edges (runtime call -> its activity, by
    correlation id), synchronisations (a blocking call such as ``cudaDeviceSynchronize`` or
    ``cudaStreamSynchronize`` returns after the activity it waited for), waits between streams
    (inferred: see ``infer_waits``) and, when several ranks are loaded and ``rank`` is not
    given, matched collectives (a rank's collective kernel moves data only once the last rank of
    its group arrived, so the path can cross to that rank). Waiting weighs nothing on the path;
    work and the delays that held work back weigh their time (see ``docs/critical-path.md``).

    Parameters
    ----------
    source : path, Trace or Analysis
        A trace file or directory of rank files (one rank, or all ranks of a job), a loaded
        trace (:func:`load`), or an analysis (:func:`analyze`; one made without its events is
        given them with the options it was made with): its GPU labels, step windows and
        matched collectives are reused. (``analysis=``, its older name, still works.)
    step : int, optional
        Only this step number (as in ``breakdown``); default: every step.
    rank : int, optional
        Only this rank, on its own (no cross-rank edges). Default: every rank; with several
        ranks the path of a step runs through all of them.
    step_range : str or None
        As in :func:`analyze` (``ProfilerStep``; ``None``: each rank's whole trace is one step,
        step 0). Ignored for an analysis.
    infer_waits : bool
        Link an activity that started more than ``wait_slack_ns`` after both its launch call and
        its stream predecessor to the activity on another stream of its rank that ended last
        before it (what a ``cudaStreamWaitEvent`` waits for). ``False``: no such edge (HTA
        without CUDA synchronisation events behaves so).
    wait_slack_ns : int
        See ``infer_waits`` (default 10 000 ns).
    host_gaps : bool
        Weigh the host's time inside no op or runtime call (``host_gap``: the own time of
        ``record_function`` ranges such as ``ProfilerStep#N``, and the time between them: Python
        between ops, a ``time.sleep``, a slow data loader). Default ``True``: a host stall is on
        the path as the host's (bucket ``host``), not as nothing. ``False`` weighs only ops and
        runtime calls, as HTA's critical path does: then a host stall outside every op leaves
        ``path_ns`` short of the step. With ``True`` a gap weighs only the time when no thread of
        the process is in an op, and the path follows the main thread's wait in ``backward``
        into autograd's worker thread; a gap under 10 µs is ``host_dispatch``.
    workers : int, optional
        When ``source`` is a path: rank files parsed and classified in parallel processes
        (default: one process for a small job, all cores for a large one; 1: in this process).

    Returns
    -------
    CriticalPath
        ``summary``: one row per step (and per rank when ranks are on their own): ``step``,
        ``rank`` (null for a path through several ranks), ``ranks`` (ranks the path visits),
        ``path_ns`` (length of the path), ``window_ns`` (span of the step's events: its host
        events and GPU work, first start to last end over the ranks; ``path_ns <= window_ns``),
        ``<bucket>_ns`` and ``<bucket>_share`` (fraction of ``path_ns``) for the buckets
        ``compute, recompute, exposed_comm, other, idle, host``, ``segments``, ``syncs`` / ``waits`` / ``collectives`` (hops of each kind on the path)
        and ``rounds`` (relaxation rounds the solver needed).

        ``segments``: the pieces of the path with weight, in time order: ``step, rank, seq,
        what`` (``kernel``, ``transfer`` — a collective after the last rank arrived —,
        ``kernel_gap``, ``launch_delay``, ``wait_gap``, ``host_op``, ``host_gap`` — Python
        outside every op: the range it is in, or null), ``bucket``, ``name`` (the op, kernel,
        range, or the activity a delay held back),
        ``where`` (``thread PID/TID`` or ``stream DEVICE/STREAM``), ``start_ns, end_ns`` and
        ``dur_ns`` (its weight: the bucket sums of a step equal ``path_ns``). All times are
        integer nanoseconds on the trace's time base.
    warnings : list of str
        The analysis' warnings (steps without GPU work, truncated files, ...).

    Raises
    ------
    InvalidArgument
        ``step`` or ``rank`` is not in the trace (the message lists the ones that are), or
        ``source`` is not a path, a trace or an analysis.

    Example
    -------
    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> cp = ta.critical_path(ta.load("fixtures/kineto/dlrm-v100-8rank"))  # 8 ranks: one path per step
    >>> cp.summary.select("step", "ranks", "path_ns", "idle_share", "host_share").row(0)
    (10, 1, 13762000, 0.06823136172068013, 0.9310419997093445)
    >>> cp.segments.group_by("rank").agg(pl.col("dur_ns").sum()).sort("rank").rows()
    [(3, 13762000)]
    """
    from traceanalyzer.classify import Analysis
    from traceanalyzer.classify.critical_path import critical_path as solve

    if source is None:
        raise InvalidArgument("source: critical_path needs a trace or an analysis")
    analysis = source if isinstance(source, Analysis) else analyze(source, step_range, workers=workers)
    analysis = resolve(analysis, tables=("events", "gpu"))
    try:
        return solve(analysis.trace, step, rank, analysis=analysis, infer_waits=infer_waits, wait_slack_ns=wait_slack_ns,
                     host_gaps=host_gaps)
    except ValueError as exc:  # a step or rank not in the trace: the message lists those that are
        raise InvalidArgument(str(exc)) from None


@checked
def annotate(
    source: Source,
    output: PathLike,
    *,
    merge: bool = False,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    cache: bool | PathLike = False,
    workers: int | None = None,
) -> list[Path]:
    """Write the trace with tracks per rank showing the buckets, for Perfetto UI.

    The same files as ``traceanalyzer annotate``: Kineto input keeps its own events and gains
    the classification tracks; Nsight Systems input (and ``merge``) is rebuilt from the parsed
    events, one process per rank.

    Parameters:
        source: as in :func:`analyze` (an analysis is given its events with the options it was
            made with).
        output: a name ending in ``.json`` or ``.json.gz`` (one rank file, or ``merge``), else a
            directory to write each rank's trace into. Never an input.
        merge: every rank in one trace.
        step_range: as in :func:`analyze` (ignored for an analysis).
        comm_kernels: as in :func:`analyze`.
        cache: as in :func:`analyze`.
        workers: as in :func:`analyze`.

    Returns:
        The files written.

    Raises:
        OutputError: ``output`` cannot be written, is an input, or names one file for several.

    Example:
        >>> import tempfile, pathlib
        >>> import traceanalyzer as ta
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "annotated.json.gz"
        >>> [f.name for f in ta.annotate("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz", out)]
        ['annotated.json.gz']
    """
    from traceanalyzer.outputs import Outputs
    from traceanalyzer.parsers import discover
    from traceanalyzer.views.annotate import check_output

    a = resolve(source, step_range, tables=("events", "gpu"), comm_kernels=comm_kernels, cache=cache, workers=workers)
    out = Path(_path(output, "output"))
    outputs = Outputs([Path(s) for s in a.trace.sources])
    check_output(outputs, out, sum(len(discover(Path(s))) for s in a.trace.sources) or a.trace.meta.height, merge)
    return _write_annotated(a, out, outputs, merge)


def _write_annotated(analysis: Any, output: Path, outputs: Any, merge: bool) -> list[Path]:
    """Write the annotated traces of an analysis holding its events; the files written.

    The report model (:func:`traceanalyzer.views.annotate.annotate`) writes the rebuilt traces
    and names the Kineto rank files to annotate; each of those is read here, one at a time
    (its whole document: the file's own events are kept as written), given its tracks
    (:func:`~traceanalyzer.views.annotate.add_tracks`) and written whole."""
    import gzip

    import orjson

    from traceanalyzer.parsers import kineto
    from traceanalyzer.views.annotate import add_tracks, annotate as plan, track_runs

    written, todo = plan(analysis, output, outputs, merge)
    if not todo:
        return written
    runs = track_runs(analysis)
    for rank, path, base, target in todo:
        raw, cut = kineto.read_bytes(path)
        size = len(raw)
        try:
            doc, _kept = kineto.decode_document(raw, path, cut)
            del raw
            add_tracks(doc, analysis, runs, rank, base)
            data = orjson.dumps(doc)
            del doc
            if target.name.endswith(".gz"):
                data = gzip.compress(data, compresslevel=6, mtime=0)
        except MemoryError:  # the whole document, rewritten: what it needs, not a bad input
            raise kineto.out_of_memory(path, size) from None
        outputs.write_bytes(target, data)
        written.append(target)
    return written
