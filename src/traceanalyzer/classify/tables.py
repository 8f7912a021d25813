"""The kernel and op tables' rows of one or more ranks (:func:`table_rows`), from the events,
the labelled GPU work and the step windows; the command line's checks of their filters.

The Python verbs over them (``traceanalyzer.kernels``, ``traceanalyzer.ops``) are in
:mod:`traceanalyzer.api`: classifiers take frames, never a path.
"""

from __future__ import annotations

import re

import polars as pl

from traceanalyzer.classify.kernelstats import SORT_KEYS
from traceanalyzer.classify.roofline import ELEMENT_BYTES
from traceanalyzer.errors import ConfigError
from traceanalyzer.queries import query_engine


def check_filters(name: str | None, sort: str, precision: str | None, top: int | None) -> None:
    """Exit-7 errors for a bad ``--name`` regex, ``--sort`` key, ``--precision`` or ``--top``."""
    if name is not None:
        try:
            re.compile(name)
        except re.error as exc:
            raise ConfigError(f"`name` is not a valid regex: {exc}") from None
    if sort not in SORT_KEYS:
        raise ConfigError(f"`sort` {sort!r} is not one of {', '.join(SORT_KEYS)}")
    if precision is not None and precision not in ELEMENT_BYTES:
        raise ConfigError(f"`precision` {precision!r} is not one of {', '.join(ELEMENT_BYTES)}")
    if top is not None and top < 1:
        raise ConfigError(f"`top` must be at least 1, got {top}")


def table_rows(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame,
               seg: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(kernel_stats, op_stats)``: the per-kernel and per-op rows of the ranks in these frames
    (:func:`~traceanalyzer.classify.kernelstats.kernel_stat_rows`,
    :func:`~traceanalyzer.classify.opstats.op_stat_rows`); ``gpu`` is the labelled GPU work,
    ``seg`` the step windows' segments sorted by rank and start when already built."""
    from traceanalyzer.classify.kernelstats import kernel_stat_rows
    from traceanalyzer.classify.opstats import op_stat_rows
    from traceanalyzer.classify.partition import segment_frame

    if seg is None:
        seg = segment_frame(gpu, windows).sort("rank", "t0").collect(engine=query_engine())
    return kernel_stat_rows(events, gpu, windows, seg), op_stat_rows(events, gpu, windows)
