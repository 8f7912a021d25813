"""Measured time buckets of a breakdown, as the waterfall reads them.

Public surface: :func:`loss_columns` (total integer ns of every waterfall bucket, split into
causes when the breakdown has cause columns).
"""

from __future__ import annotations

import re

import polars as pl

_CAUSE = {"exposed_comm": re.compile(r"^exposed_comm_(.+)_(ns|us)$"), "idle": re.compile(r"^idle_(.+)_(ns|us)$")}
#: columns that split a cause further (host-bound idle by what the host did): not causes of their own
_SUB_CAUSE = re.compile(r"^idle_host_(dataloader|optimizer|ops|untraced)_(ns|us)$")


def loss_columns(steps: pl.DataFrame) -> dict[str, int]:
    """Total integer ns of every waterfall bucket over all (rank, step) rows.

    ``exposed_comm`` and ``idle`` are replaced by their cause columns when the breakdown has
    them (``exposed_comm_<dim>_ns|_us``, ``idle_<cause>_ns|_us``); whatever the causes do not
    cover is kept as ``<bucket>_unattributed``.
    """
    out: dict[str, int] = {}
    for bucket in ("compute", "recompute", "exposed_comm", "other", "idle"):
        total = int(steps[f"{bucket}_ns"].sum())
        causes: dict[str, int] = {}
        if bucket in _CAUSE:
            for col in steps.columns:
                m = _CAUSE[bucket].match(col)
                if not m or _SUB_CAUSE.match(col) or (m.group(2) == "us" and f"{bucket}_{m.group(1)}_ns" in steps.columns):
                    continue
                v = steps[col].sum()
                causes[f"{bucket}_{m.group(1)}"] = int(v) if m.group(2) == "ns" else int(round(float(v) * 1000))
        if causes:
            rest = total - sum(causes.values())
            out.update(causes)
            if rest:
                out[f"{bucket}_unattributed"] = rest
        else:
            out[bucket] = total
    return out


