"""Tables for machines: one polars frame written as CSV, Parquet or JSON rows.

Formatting only (the command computes the frame). Parquet is written by polars' own Rust
writer (no pyarrow on this path); CSV with a header row; JSON as a document
``{"schema": ..., "columns": [...], "rows": [{...}, ...]}`` so that it carries its schema id
like every other JSON output.
"""

from __future__ import annotations

from typing import IO

import orjson
import polars as pl


def write_frame(frame: pl.DataFrame, fmt: str, fh: IO[bytes], *, schema: str | None = None, extra: dict | None = None) -> None:
    """``frame`` in ``fmt`` (csv, parquet or json) to the binary stream ``fh``."""
    if fmt == "csv":
        fh.write(frame.write_csv().encode())
    elif fmt == "parquet":
        import io

        buf = io.BytesIO()  # polars needs a seekable target; stdout is not
        frame.write_parquet(buf)
        fh.write(buf.getvalue())
    elif fmt == "json":
        doc = {**({"schema": schema} if schema else {}), **(extra or {}), "columns": frame.columns, "rows": frame.to_dicts()}
        fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n")
    else:  # pragma: no cover - the command's Enum allows only these
        raise ValueError(f"unknown table format {fmt!r}")
