"""Result frames for people and machines: a terminal table (``*_ns`` in one unit per column), JSON, CSV,
Parquet. Formatting only: every number comes from the frame (the command computes it).

Parquet is written by polars' own Rust writer (no pyarrow on this path); CSV with a header row;
:func:`write_frame`'s JSON is ``{"schema": ..., "columns": [...], "rows": [{...}, ...]}`` so that
it carries its schema id like every other JSON output.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

import orjson
import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.render import units

if TYPE_CHECKING:  # rich loads where a table is printed, not for the machine formats
    from rich.console import Console
    from rich.table import Table


def table(df: pl.DataFrame, title: str, *, limit: int | None = None, caption: str | None = None,
          labels: dict[str, str] | None = None) -> Table:
    """A rich table of ``df``: each ``<x>_ns`` column in one unit chosen for it (``<x> ms``,
    ``<x> µs``: :func:`traceanalyzer.render.units.column_unit`), shares as %,
    floats with 4 significant digits; ``limit``: the first rows only (the caption says so);
    ``labels``: column headings by column name (the unit is added to ``_ns`` columns)."""
    from rich.table import Table

    shown = df if limit is None else df.head(limit)
    more = df.height - shown.height
    note = [caption] if caption else []
    if more > 0:
        note.append(f"{more} more rows not shown (use -f csv or -f json for all of them)")
    t = Table(title=title, title_justify="left", caption="\n".join(note) or None, caption_justify="left")
    cols = shown.columns
    timed = {c: units.column_unit(shown.get_column(c).to_list()) for c in cols if c.endswith("_ns")}
    for c in cols:
        base = (labels or {}).get(c, c[:-3] if c.endswith("_ns") else c)
        head = f"{base} {timed[c][0]}" if c in timed else base
        text = shown.schema[c] == pl.String
        t.add_column(head, justify="left" if text else "right", overflow="fold", min_width=24 if c == "name" else None)
    for row in shown.iter_rows():  # display rows only (at most ``limit``)
        t.add_row(*[_cell(c, v, timed.get(c)) for c, v in zip(cols, row)])
    return t


def _cell(col: str, v: Any, unit: tuple[str, float, int] | None = None) -> str:
    if v is None:
        return "-"
    if unit is not None:  # a *_ns column, in the unit chosen for the whole column
        return units.fixed(v / unit[1], unit[2])
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if col.endswith("share") or col == "mfu":
            return f"{100 * v:.1f}%"
        return f"{v:.4g}"
    return str(v)


def print_table(df: pl.DataFrame, title: str, console: Console, **kw: Any) -> None:
    console.print(table(df, title, **kw))


def json_bytes(command: str, frames: dict[str, pl.DataFrame], **header: Any) -> bytes:
    """``{"schema", "schema_version", "command", "version", "units", <header>..., <name>: [row objects]...}``;
    the schema is ``traceanalyzer.<command>`` (``traceanalyzer/schemas/<command>.schema.json``)."""
    doc: dict[str, Any] = {"schema": f"traceanalyzer.{command}", "schema_version": 1, "command": command, "version": __version__, "units": "ns (integer) unless named otherwise", **header}
    for name, df in frames.items():
        doc[name] = df.to_dicts()
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def write_csv(df: pl.DataFrame, fh: IO[bytes]) -> None:
    """CSV with a header row (integer ns as written, floats in full)."""
    fh.write(df.write_csv().encode())


def write_frame(frame: pl.DataFrame, fmt: str, fh: IO[bytes], *, schema: str | None = None, extra: dict[str, Any] | None = None) -> None:
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


def frame_bytes(frame: pl.DataFrame, fmt: str, **kw: Any) -> bytes:
    """:func:`write_frame`'s bytes."""
    import io

    buf = io.BytesIO()
    write_frame(frame, fmt, buf, **kw)
    return buf.getvalue()
