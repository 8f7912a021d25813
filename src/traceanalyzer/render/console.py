"""The console every command prints its tables with: the width a person's terminal (or
``$COLUMNS``) allows, and no line padded with spaces when the output is a pipe or a file."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import sys
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.style import StyleType
from rich.table import Table
from rich.text import Text


def out_console(file: IO[str] | None = None, width: int | None = None, *, markup: bool = False) -> Console:
    """A console for results (stdout, or an output file): no markup interpretation of user text
    (unless ``markup``: for text that escapes it), no highlighting. Width on stdout: ``$COLUMNS``
    when set, else the terminal's, else ``width``; in a file: ``width``. No line it writes to a
    pipe or a file ends in a space (see :class:`NoTrailingSpaces`)."""
    if file is None:
        file = sys.stdout
        width = terminal_width(width)
    out: IO[str] = file if _isatty(file) else NoTrailingSpaces(file)  # type: ignore[assignment]  # a text stream: write and the stream's own
    return FittingConsole(file=out, highlight=False, markup=markup, width=width)


def terminal_width(default: int | None) -> int | None:
    """The width of standard output: ``$COLUMNS`` when set (as rich reads it, even for a pipe),
    else None on a terminal (rich asks it), else ``default``."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if _isatty(sys.stdout) else default


def _isatty(file: object) -> bool:
    try:
        return bool(file.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


class NoTrailingSpaces:
    """A text stream that drops the spaces rich pads a line with to the console's width (titles,
    captions, left-justified text) before each newline (styling codes after them are kept); a
    pipe or a file gets no line ending in a space. Everything else goes to ``file`` unchanged."""

    _PAD = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")

    def __init__(self, file: IO[str]) -> None:
        self._file = file

    def write(self, text: str) -> int:
        self._file.write(self._PAD.sub(r"\1", text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self._file, name)


class FittingConsole(Console):
    """A console whose tables fit its width without cutting a word: see :func:`fit_table`."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        if any(isinstance(o, Table) for o in objects):
            for o in objects:
                for part in fit_table(o, self) if isinstance(o, Table) else [o]:
                    super().print(part, **kwargs)
            return
        super().print(*objects, **kwargs)


def fit_table(table: Table, console: Console) -> list[RenderableType]:
    """``table`` laid out to fit ``console.width`` with no header, number or word cut short (rich
    alone shrinks every column evenly at the end, which cuts headers to "recom…" and numbers to
    "47.2…"): a table that fits is left as it is; else every column gets at least its longest word
    (its whole text where it may not wrap) and the room left goes to the columns that wrap least;
    a table whose columns cannot fit side by side even so is split into tables of consecutive
    columns, each repeating the row's key (the first column and the text columns after it). A title
    or caption justified left is printed as a paragraph of its own, as wide as the console.
    Layout only: the cells are the table's, and ``table`` itself is left as it is."""
    width = console.width
    cols = table.columns
    if not cols or table.expand or table.width is not None:
        return [table]
    # a left-justified title or caption: a paragraph of its own, as wide as the console (inside the
    # table it would wrap at the table's width)
    head: list[RenderableType] = []
    tail: list[RenderableType] = []
    if table.title is not None and table.title_justify == "left":
        head.append(_paragraph(table.title, table.title_style or "table.title", console))
    if table.caption is not None and table.caption_justify == "left":
        tail.append(_paragraph(table.caption, table.caption_style or "table.caption", console))
    if head or tail:
        table = copy.copy(table)
        table.title = None if head else table.title
        table.caption = None if tail else table.caption
    return [*head, *_fit(table, console, width), *tail]


def _paragraph(text: str | Text, style: StyleType, console: Console) -> Text:
    text = text if isinstance(text, Text) else console.render_str(str(text))
    return Text.assemble(text, style=style, justify="left")


def _fit(table: Table, console: Console, width: int) -> list[Table]:
    cols = table.columns
    natural, least = _column_widths(table, console)
    if sum(natural) + _overhead(table, len(cols)) <= width:
        return [table]
    if sum(least) + _overhead(table, len(cols)) <= width:
        table = copy.copy(table)
        table.columns = [dataclasses.replace(c) for c in cols]
        _set_widths(table, natural, least, width - _overhead(table, len(cols)))
        return [table]
    # the key: the first column and the text columns right after it (rank, by, key...)
    key = [0]
    while len(key) < len(cols) - 1 and cols[len(key)].justify == "left":
        key.append(len(key))
    if sum(least[i] for i in key) > width // 2:
        key = [0]
    parts: list[list[int]] = []
    current = list(key)
    for i in range(len(key), len(cols)):
        trial = [*current, i]
        if len(current) > len(key) and sum(least[j] for j in trial) + _overhead(table, len(trial)) > width:
            parts.append(current)
            current = [*key, i]
        else:
            current = trial
    parts.append(current)
    if len(parts) == 1:  # one column beside the key is already too wide: nothing better to do
        return [table]
    out: list[Table] = []
    for k, idx in enumerate(parts):
        part = copy.copy(table)
        part.columns = [dataclasses.replace(cols[i], _index=j, _cells=list(cols[i]._cells)) for j, i in enumerate(idx)]
        part.title = table.title if k == 0 else "(continued)"
        part.caption = table.caption if k == len(parts) - 1 else None
        nat = [natural[i] for i in idx]
        low = [least[i] for i in idx]
        if sum(nat) + _overhead(part, len(idx)) > width:
            _set_widths(part, nat, low, width - _overhead(part, len(idx)))
        out.append(part)
    return out


#: the least width of a column whose words may be broken anywhere (overflow="fold": kernel names)
FOLD_WIDTH = 20


def _column_widths(table: Table, console: Console) -> tuple[list[int], list[int]]:
    """Per column: its natural width (the longest line of header and cells) and the least it
    can take, padding excluded: a header may wrap between words; a number (a right-justified
    column, or one that may not wrap) is never broken; text may wrap between words, and where
    the column folds (kernel names), anywhere down to :data:`FOLD_WIDTH`."""
    options = console.options
    natural: list[int] = []
    least: list[int] = []
    for c in table.columns:
        head = [Measurement.get(console, options, c.header)] if table.show_header and c.header else []
        cells = [Measurement.get(console, options, cell) for cell in c._cells if cell is not None]
        nat = max((m.maximum for m in [*head, *cells]), default=0)
        if c.no_wrap or c.justify == "right":
            low = max((m.maximum for m in cells), default=0)
        else:
            low = max((m.minimum for m in cells), default=0)
            if c.overflow == "fold":
                low = min(low, FOLD_WIDTH)
        low = max(low, *(m.minimum for m in head), min(c.min_width or 0, nat))
        natural.append(nat)
        least.append(low)
    return natural, least


def _overhead(table: Table, n: int) -> int:
    """Width of a table of ``n`` columns beyond its cells' text: padding and rules."""
    _, right, _, left = table.padding
    pad = n * (left + right) - (0 if table.pad_edge else left + right)
    rules = ((2 if table.show_edge else 0) + n - 1) if table.box else 0
    return pad + rules


def _set_widths(table: Table, natural: list[int], least: list[int], room: int) -> None:
    """Fixed column widths: each column its least, the room left shared out to the columns that
    need the least more first (so that as few columns as possible wrap)."""
    widths = list(least)
    spare = max(0, room - sum(widths))
    order = sorted(range(len(widths)), key=lambda i: natural[i] - least[i])
    for n_left, i in zip(range(len(order), 0, -1), order):
        give = min(natural[i] - widths[i], -(-spare // n_left))  # a fair share, rounded up
        widths[i] += give
        spare -= give
    for i in sorted(order, key=lambda i: least[i] - natural[i]):  # what is left: the widest first
        give = min(natural[i] - widths[i], spare)
        widths[i] += give
        spare -= give
    for c, w in zip(table.columns, widths):
        c.width = max(w, 1)
