"""Columns computed from event names, once per distinct name.

A rank holds a few hundred distinct names among hundreds of thousands of events, and some name
patterns are costly per row (a case-insensitive regex with no literal to search for first, such
as the MoE ranges' ``dispatch``/``combine`` words: 12 ms over the 123,000 events of a 54 MB trace).
:func:`name_columns` evaluates such expressions on the distinct names and joins the answers
back (one hash join on the name: about 2 ms there).
"""

from __future__ import annotations

import polars as pl


def name_columns(frame: pl.LazyFrame, **columns: pl.Expr) -> pl.LazyFrame:
    """``frame`` with one more column per keyword: ``columns[k]``, an expression of the column
    ``name`` alone, evaluated on each distinct name (a null name included). Row order and count
    are kept."""
    names = frame.select(pl.col("name").unique()).with_columns(e.alias(k) for k, e in columns.items())
    return frame.join(names, on="name", how="left", nulls_equal=True, maintain_order="left")
