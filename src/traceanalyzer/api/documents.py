"""Two runs side by side, and the report document.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import PathLike, Source, _choice, _source_arg
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import analyze, input_fingerprints, run_configuration
from traceanalyzer.api.tables import analysis_with_tables
from traceanalyzer.errors import InvalidArgument
from traceanalyzer.results import ReportModel

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis


@checked
def compare(a: Source, b: Source) -> pl.DataFrame:
    """Why is B slower (or faster) than A: the gap in mean step time, split exactly by bucket.

    Each step is an exact partition, so the mean step time is the sum of the mean buckets and
    the per-bucket differences sum exactly to the gap. ``exposed_comm`` and ``idle`` are split
    into their causes (dimensions, idle causes). Compare two runs, or two parts of one run
    with :func:`select` (two steps, the fastest and the slowest rank).

    Parameters:
        a: the reference (as in :func:`analyze`).
        b: the run compared with it.

    Returns:
        One row per term (``compute``, ``recompute``, ``exposed_comm_<dim>``, ``other``,
        ``idle_<cause>``), largest difference first: ``term``, ``a_ms``, ``b_ms`` (Float64:
        mean per rank and step, milliseconds) and ``diff_ms`` (``b_ms − a_ms``). The sum of
        ``diff_ms`` is the gap in mean step time.

    Example:
        >>> import traceanalyzer as ta
        >>> an = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> d = ta.compare(ta.select(an, ranks=[7]), ta.select(an, ranks=[1]))
        >>> round(d["diff_ms"].sum(), 3)
        7.392
        >>> d.row(0)
        ('exposed_comm_dp', 1.58, 11.056, 9.476)
    """
    from traceanalyzer.reconciliation import compare_time

    res = compare_time(analyze(_source_arg(a, "a")), analyze(_source_arg(b, "b")))
    return pl.DataFrame(
        [(t["term"], t["a_ms"], t["b_ms"], t["contribution_ms"]) for t in res["terms"]],
        schema={"term": pl.String, "a_ms": pl.Float64, "b_ms": pl.Float64, "diff_ms": pl.Float64},
        orient="row",
    )


def time_comparison(a: Analysis, b: Analysis) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the step-time gap split by bucket, the kernel diff) of two analyses holding their
    per-kernel rows; the kernel diff must sum exactly to the bucket differences
    (InvariantViolation naming both runs otherwise)."""
    from traceanalyzer.errors import InvariantViolation
    from traceanalyzer.reconciliation import compare_time
    from traceanalyzer.reconciliation.kerneldiff import bucket_gaps, kernel_diff

    cmp_t = compare_time(a, b)
    diff = kernel_diff(a, b)
    gaps = bucket_gaps(cmp_t)
    if any(diff["exact"][f"{k}_ns"] != gaps[k] for k in gaps):
        names = [", ".join(map(str, x.trace.sources[:3])) or "trace" for x in (a, b)]
        raise InvariantViolation(f"the kernel diff does not sum to the bucket differences of {names[0]} and {names[1]}")
    return cmp_t, diff


@checked
def kernel_diff(a: Source, b: Source) -> pl.DataFrame:
    """Which kernels made B slower (or faster) than A: the step-time gap per kernel.

    Each kernel's contribution is the change of its exact share of its bucket per rank-step, so
    the contributions of the kernels of a bucket sum exactly to that bucket's difference in
    :func:`compare` (checked).

    Parameters:
        a: the reference (as in :func:`analyze`; an analysis is given its per-kernel rows with
            the options it was made with).
        b: the run compared with it.

    Returns:
        One row per kernel name and class, largest change first: ``name``, ``bucket`` (its
        class: compute, recompute, comm, other), ``status`` (``changed``, ``new``, ``gone``),
        ``calls_a``, ``calls_b`` (per rank-step), ``total_ms_a``, ``total_ms_b`` (its time),
        ``bucket_ms_a``, ``bucket_ms_b`` (its exact share of its bucket) and
        ``contribution_ms`` (``bucket_ms_b − bucket_ms_a``; Float64 milliseconds per rank-step).

    Raises:
        InvariantViolation: the contributions do not sum to the bucket differences (a bug).

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> an = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> d = ta.kernel_diff(ta.select(an, ranks=[7]), ta.select(an, ranks=[1]))
        >>> d.select("bucket", "calls_b", pl.col("bucket_ms_a", "bucket_ms_b", "contribution_ms").round(3)).row(0)
        ('comm', 5.0, 0.335, 9.389, 9.054)
        >>> round(d.filter(bucket="comm")["contribution_ms"].sum(), 3)  # = compare's exposed_comm_dp
        9.476
    """
    _cmp, diff = time_comparison(analysis_with_tables(a), analysis_with_tables(b))
    return pl.DataFrame(diff["rows"], schema=KERNEL_DIFF_SCHEMA)  # no kernel on either side: no row, the same columns


#: the columns of :func:`kernel_diff`
KERNEL_DIFF_SCHEMA = {
    "name": pl.String, "bucket": pl.String, "status": pl.String, "calls_a": pl.Float64, "calls_b": pl.Float64,
    "total_ms_a": pl.Float64, "total_ms_b": pl.Float64, "bucket_ms_a": pl.Float64, "bucket_ms_b": pl.Float64,
    "contribution_ms": pl.Float64,
}


@renamed_parameter("ranks", "show_ranks", version=RENAMED_IN)
@checked
def report(
    source: Source,
    output: PathLike | None = None,
    *,
    format: Literal["html", "markdown", "json"] | None = None,
    config: PathLike | None = None,
    rank: int | None = None,
    top: int = 10,
    show_ranks: Literal["auto", "all", "summary"] = "auto",
) -> ReportModel:
    """The report model (every number a report shows), optionally written as HTML, Markdown or JSON.

    Parameters:
        source: as in :func:`analyze`.
        output: file to write; none: only return the model.
        format: ``"html"`` (one self-contained file), ``"markdown"`` (plots embedded as data
            URIs) or ``"json"``; default: from the suffix of ``output`` (``.md`` Markdown,
            ``.json`` JSON, anything else HTML).
        config: run configuration (TOML) for achieved TFLOP/s, MFU and the waterfall.
        rank: the rank whose per-step timeline is shown first (default: the slowest); the model
            holds up to 7 more ranks' timelines (``more_timelines``), the HTML a selector.
        top: rows in the top-kernel and top-collective tables.
        show_ranks: ``"auto"``: a summary of the ranks' distribution above 16 ranks, every rank up
            to that; ``"all"``: every rank; ``"summary"``: the summary whatever the count.

    Returns:
        The report model, a :class:`~traceanalyzer.results.ReportModel` (frozen; ``to_dict()``:
        the document ``traceanalyzer report -f json`` writes): ``headline``, ``ranks`` (one entry per rank), ``rank_summary`` (the rows of
        :func:`rank_summary` in ms, or ``None`` when every rank is listed), ``stragglers``,
        ``steps``, ``timeline``, ``more_timelines``, ``top_kernels``, ``top_exposed_collectives``, ``warnings``...;
        times in ms (``*_ms``), shares in % (``*_pct``).

    Raises:
        InvalidArgument: a bad ``format``, ``show_ranks``, ``rank`` or ``top``.
        OutputError: ``output`` cannot be written or is one of the inputs.
        ConfigError: ``config`` is missing or invalid.

    Example:
        >>> import traceanalyzer as ta
        >>> m = ta.report("fixtures/kineto/dlrm-v100-8rank")
        >>> m.headline["slowest_rank"], round(m.headline["step_ms"], 3)
        (1, 16.008)
        >>> m.rank_summary is None, len(m.ranks)
        (True, 8)
    """
    from traceanalyzer.outputs import Outputs
    from traceanalyzer.views import document

    if format is not None:
        _choice("format", format, ("html", "markdown", "json"))
    _choice("show_ranks", show_ranks, ("auto", "all", "summary"))
    if config is not None and not isinstance(config, (str, os.PathLike)):
        raise InvalidArgument(f"config: expected the path of a run configuration (report reads the file), got {type(config).__name__}")
    if not isinstance(top, int) or not 1 <= top <= 1000:
        raise InvalidArgument(f"top must be an integer from 1 to 1000, got {top!r}")
    from traceanalyzer.engine import with_tables

    a = analyze(source)
    a = with_tables(a, "kernel_stats", "trace_facts", if_possible=True)  # the top-kernel table, the integrity checks' facts
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
        raise InvalidArgument(f"rank: expected an integer, got {type(rank).__name__} {rank!r}")
    if rank is not None and rank not in a.trace.ranks:
        raise InvalidArgument(f"rank: no rank {rank} in the trace (ranks: {a.trace.ranks[:16]})")
    cfg = run_configuration(config)
    inputs = input_fingerprints(a.trace.sources, config)
    model = document.build(a, rank=rank, config=cfg, inputs=inputs, top=top, ranks=show_ranks)
    if output is None:
        return ReportModel.from_dict(model)
    out = Path(output)
    fmt = format or ("markdown" if out.suffix.lower() in (".md", ".markdown") else "json" if out.suffix.lower() == ".json" else "html")
    outputs = Outputs([*a.trace.sources, *([Path(config)] if config is not None else [])])
    outputs.check(out)
    write_report(model, out, fmt, outputs, embed=True)
    return ReportModel.from_dict(model)


def write_report(model: dict[str, Any], output: Path | None, fmt: str, outputs: Any, *, embed: bool = True) -> None:
    """Write a report model as ``fmt`` (``json``: to ``output``, or standard output without it;
    ``html``; ``markdown``: plots as data URIs with ``embed``, else PNG files beside it), every
    file through ``outputs`` (none over an input, each whole or not at all)."""
    if fmt == "json":
        from traceanalyzer.render import json as json_render

        with outputs.stream(output) as fh:
            fh.write(json_render.dumps(model))
        return
    assert output is not None
    if fmt == "html":  # plots as inline SVG: no matplotlib
        from traceanalyzer.render import html

        outputs.write_text(output, html.render(model))
        return
    from traceanalyzer.render import markdown, plots

    images = plots.render_all(model)

    if embed:
        refs = {stem: markdown.data_uri(png) for stem, png in images.items()}
    else:
        stem = output.name[: -len(".md")] if output.name.endswith(".md") else output.name
        refs = {plot: f"{stem}_{plot}.png" for plot in images}
        for name in refs.values():  # all checked before any is written
            outputs.check(output.parent / name)
        for plot, png in images.items():
            outputs.write_bytes(output.parent / refs[plot], png)
    outputs.write_text(output, markdown.render(model, refs))
