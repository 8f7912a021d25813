"""The output formats, and the one writer of a command's output.

Every format knows the file extensions that name it and whether it is binary (written as bytes,
never to a terminal), as a renderer of pyinstrument declares its ``output_file_extension`` and
``output_is_binary``: the command line reads the format an output's name asks for from here
(``-o report.md``), and refuses a binary format on a terminal, for every command alike.

:func:`write` puts a rendered output where it was asked to go: standard output, or the ``-o``
file through :class:`traceanalyzer.outputs.Outputs` (never over an input, whole or not at all).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Callable, Union


class Format(str, Enum):
    """Every output format of the command line (each command offers some of them with ``-f``)."""

    table = "table"  # the terminal table (rich)
    text = "text"  # lines of words
    json = "json"
    csv = "csv"
    parquet = "parquet"
    markdown = "markdown"
    html = "html"

    @property
    def extensions(self) -> tuple[str, ...]:
        """The extensions of an output name that ask for this format (lower case)."""
        return tuple(e for e, f in EXTENSIONS.items() if f is self or (f is Format.text and self is Format.table))

    @property
    def binary(self) -> bool:
        """Written as bytes that mean nothing on a terminal: to a file (-o) or a pipe only."""
        return self is Format.parquet

    @property
    def plain(self) -> bool:
        """One of the plain-text formats (``.txt`` names whichever of them a command has)."""
        return self in (Format.table, Format.text)

    @classmethod
    def named_by(cls, suffix: str, offered: tuple[str, ...] = ()) -> Format | None:
        """The format an output name's extension asks for: among ``offered`` (a command's formats)
        where one of them has it (``.txt``: the command's plain-text format), else the format that
        has it, else None (an extension no format has)."""
        wanted = EXTENSIONS.get(suffix.lower())
        if wanted is None:
            return None
        return next((Format(f) for f in offered if suffix.lower() in Format(f).extensions), wanted)


#: each extension an output name may end with, and the format it asks for (``.txt``: the
#: command's plain-text format, table or text)
EXTENSIONS: dict[str, Format] = {".md": Format.markdown, ".markdown": Format.markdown, ".json": Format.json, ".html": Format.html,
                                 ".htm": Format.html, ".csv": Format.csv, ".parquet": Format.parquet, ".txt": Format.text,
                                 ".text": Format.text}


def subset(*names: str) -> Any:
    """The choices of one command's ``-f``: an Enum of some of the formats, in that order (a
    member equals the :class:`Format` of its value; ``Format(member)`` converts it)."""
    for n in names:
        Format(n)  # only formats this module knows
    return Enum("Format", {n: n for n in names}, type=str)


#: what a renderer gives the writer: the document (text or bytes), or, for the terminal table, a
#: function that prints to the console it is given
Rendered = Union[str, bytes, Callable[[Any], None]]


def write(rendered: Rendered, output: Path | None = None, outputs: Any = None, *, width: int | None = None,
          file_width: int | None = None, markup: bool = False) -> None:
    """Write ``rendered`` to standard output, or to ``output`` through ``outputs`` (an
    :class:`~traceanalyzer.outputs.Outputs` knowing the command's inputs). Bytes are written as
    they are, text as UTF-8; a function is called with a rich console on the destination, ``width``
    wide on standard output (unless ``$COLUMNS`` or the terminal says otherwise) and ``file_width``
    (default ``width``) in a file; ``markup``: the renderer escapes user text itself."""
    from traceanalyzer.outputs import Outputs

    outputs = outputs if outputs is not None else Outputs()
    if isinstance(rendered, bytes):
        with outputs.stream(output) as fh:
            fh.write(rendered)
        return
    with outputs.stream(output, "w") as fh:
        if isinstance(rendered, str):
            fh.write(rendered)
            return
        from traceanalyzer.render.console import out_console

        if output is None:
            rendered(out_console(None, width, markup=markup))
        else:
            rendered(out_console(fh, file_width or width, markup=markup))
