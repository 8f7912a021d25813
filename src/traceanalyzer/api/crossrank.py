"""The cross-rank verbs: the replay of the job, what each straggler costs it, who waited on whom,
and the bytes each parallel dimension moved against the model's prediction."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.results import StragglerView

if TYPE_CHECKING:
    from traceanalyzer.api._common import PathLike, Source
    from traceanalyzer.results import Analysis


def _analysis(source: Source) -> Analysis:
    from traceanalyzer.api.loading import analyze

    return analyze(source)


def _inputs(a: Analysis) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    from traceanalyzer.classify.stragglercost import inputs

    return inputs(a)


@checked
def replay(source: Source) -> pl.DataFrame:
    """The cross-rank replay of the measured job, against the measured steps.

    Each rank's step is rebuilt from its own work (the time from each collective's end to its
    next arrival at a collective, and to its step's end) and the collectives it shares with the
    other ranks (a collective ends on a rank when its last participant arrives plus that rank's
    transfer). With the measured durations it gives back every rank's step: the check that the
    dependencies are those the trace shows, before :func:`straggler_costs` changes them.

    Parameters:
        source: as in :func:`analyze`.

    Returns:
        One row per rank and step: ``rank``, ``step``, ``measured_ms`` (the step's duration),
        ``replayed_ms`` (Float64 milliseconds); sorted by rank and step.

    Example:
        >>> import traceanalyzer as ta
        >>> r = ta.replay("fixtures/kineto/dlrm-v100-8rank")
        >>> r.filter(rank=7).select("measured_ms", "replayed_ms").row(0)
        (12.509, 12.509)
    """
    from traceanalyzer.classify import replay as rp

    a = _analysis(source)
    points, kern, steps = _inputs(a)
    if points.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "measured_ms": pl.Float64, "replayed_ms": pl.Float64})
    return rp.replay_table(steps, points, rp.replay_graph(points, kern))


@checked
def straggler_costs(source: Source) -> pl.DataFrame:
    """What each rank costs the job, phase by phase: the job's step time had that rank run that
    phase like the median rank (a replay of the job, see :func:`replay`).

    Phases: ``compute`` (the GPU's busy time before each of the rank's arrivals at a collective,
    or before its step's end), ``host_stall`` (the idle time there: the GPU waiting for the host;
    before a rank's first collective it includes a late start of its step) and ``transfer`` (the
    transfer of its kernels of a collective). Each is shortened to the median over the ranks of
    the same point when it is longer (a typical or fast rank costs nothing). The job's step time
    is, per step, the longest replayed step over the ranks, averaged over the steps.

    Parameters:
        source: as in :func:`analyze`.

    Returns:
        One row per rank, phase and collective, most costly first: ``rank``, ``phase``,
        ``collective`` (the collective type the phase leads to, or whose transfer it is; null
        before a step's end), ``group`` (its process group), ``cost_ms_per_step`` (the job's
        step time saved), ``made_wait_ms_per_step`` (the other ranks' wait in that collective
        charged to this rank: it arrived last), ``waited_ms_per_step`` (its own wait there);
        Float64 milliseconds per step.

    Example:
        >>> import traceanalyzer as ta
        >>> c = ta.straggler_costs("fixtures/kineto/dlrm-v100-8rank")
        >>> c.select("rank", "phase", "collective", "cost_ms_per_step").row(0)
        (7, 'host_stall', 'all_to_all', 1.3)
    """
    return straggler_view(source).costs


@checked
def wait_matrix(source: Source) -> pl.DataFrame:
    """Who waited on whom: per collective type and process group, the time each rank waited for
    each other rank (the last arrival of each matched instance is charged every other rank's
    wait; a tie shares it equally).

    Parameters:
        source: as in :func:`analyze`.

    Returns:
        One row per (collective, group, rank that waited, rank it waited on) with a wait:
        ``collective``, ``group``, ``rank``, ``on_rank``, ``wait_ms_per_step`` (Float64 ms per
        step), ``instances`` (UInt32: the instances in which it did).

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> m = ta.wait_matrix("fixtures/kineto/dlrm-v100-8rank")
        >>> m.filter(collective="all_to_all").group_by("on_rank").agg(pl.col("wait_ms_per_step").sum()).sort("wait_ms_per_step").row(-1)[0]
        7
    """
    from traceanalyzer.classify import stragglercost as sc

    a = _analysis(source)
    points, kern, _ = _inputs(a)
    return sc.wait_matrix(kern, max(points.get_column("step").drop_nulls().n_unique(), 1))


@checked
def straggler_view(source: Source, *, tolerance: float = 0.05) -> StragglerView:
    """Everything the ``stragglers`` command shows, in one call.

    Parameters:
        source: as in :func:`analyze`.
        tolerance: as in :func:`stragglers`.

    Returns:
        A :class:`~traceanalyzer.results.StragglerView` (frozen; ``to_dict()``: these fields as a
        ``dict``): ``ranks`` (:func:`stragglers` per rank with ``made_wait_ms_per_step``,
        ``waited_ms_per_step``, ``role``: ``"made others wait"`` when it made the others wait
        more than it waited, ``"waited"`` when it waited more, and its most costly phase:
        ``top_phase``, ``top_collective``, ``top_cost_ms_per_step``), ``costs``
        (:func:`straggler_costs`), ``total_cost_ms_per_step`` (every rank made typical at once),
        ``replay`` (:func:`replay`), ``wait_matrix`` (:func:`wait_matrix`), ``warnings``.

    Raises:
        InvalidArgument: ``tolerance`` is negative.

    Example:
        >>> import traceanalyzer as ta
        >>> v = ta.straggler_view("fixtures/kineto/dlrm-v100-8rank")
        >>> v.ranks.filter(role="made others wait")["rank"].to_list()
        [7, 5]
    """
    from traceanalyzer.classify.stragglercost import job_view
    from traceanalyzer.classify.stragglers import DEFAULT_TOLERANCE
    from traceanalyzer.errors import InvalidArgument

    if not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise InvalidArgument(f"tolerance must be a non-negative fraction, got {tolerance!r}")
    a = _analysis(source)
    return StragglerView.from_dict(dict(a.straggler_view()) if tolerance == DEFAULT_TOLERANCE else job_view(a, tolerance))


@checked
def comm_bytes(source: Source, config: PathLike) -> pl.DataFrame:
    """Bytes each parallel dimension moved per step, measured beside the analytic model's
    prediction for the run configuration.

    Measured: the ``bytes`` of the collective kernels (where the trace gives sizes) summed per
    dimension and step, averaged over the steps, the mean over the ranks. Predicted: the
    communication volume per GPU and step of the configuration's layout
    (:func:`traceanalyzer.model.predict`).

    Parameters:
        source: as in :func:`analyze`.
        config: run configuration (a TOML file or a RunConfig) with a ``[model]`` and a layout.

    Returns:
        One row per dimension measured or predicted: ``dim``, ``measured_bytes`` (Float64 per
        rank and step; null when no kernel of the dimension carries a size), ``kernels``
        (UInt32: kernels of that dimension per rank and step), ``sized`` (those with a size),
        ``predicted_bytes`` (Float64; null when the model predicts none), ``ratio``
        (measured / predicted), ``warning`` (Boolean: they differ by more than 20 %).

    Raises:
        ConfigError: ``config`` is missing or invalid.

    Example:
        >>> import traceanalyzer as ta
        >>> t = ta.comm_bytes("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
        ...                   "docs/examples/traces/mi300x-resnet18-ckpt.toml")
        >>> t.select("dim", "predicted_bytes", "warning").row(0)
        ('DP', None, False)
    """
    from traceanalyzer.api._common import _config
    from traceanalyzer.reconciliation.commbytes import comm_bytes_table

    a = _analysis(source)
    return comm_bytes_table(a, _config(config))


__all__ = ["replay", "straggler_costs", "wait_matrix", "straggler_view", "comm_bytes"]
