"""The markers a symbolic run of a launch script leaves in the words it expands.

A variable the script never assigns expands to ``\\x00NAME\\x00`` (:data:`UNSET`); a default
``${NAME:-value}`` used because NAME was never assigned expands to ``\\x01NAME\\x02value\\x03``.
The functions here read those markers back: which names a text depends on, which defaults it
relied on, and the text as a person reads it.
"""

from __future__ import annotations

import re

UNSET = "\x00"  # \x00NAME\x00: a variable set outside the script
DEF_OPEN, DEF_MID, DEF_CLOSE = "\x01", "\x02", "\x03"  # \x01NAME\x02value\x03: default used
UNSET_RE = re.compile(r"\x00([^\x00]*)\x00")
DEF_RE = re.compile(r"\x01([^\x02]*)\x02([^\x03]*)\x03")
_NBSP = "\x04"  # spaces inside a marker (``$(cmd arg)``) must not split words


def mark(name: str) -> str:
    """The marker of ``name``, a variable set outside the script."""
    return f"{UNSET}{name.replace(' ', _NBSP)}{UNSET}"


def unresolved_names(text: str) -> list[str]:
    """Names of the variables set outside the script that ``text`` depends on."""
    return [n.replace(_NBSP, " ") for n in UNSET_RE.findall(text)]


def shown(text: str) -> str:
    """``text`` as a person reads it: markers back to ``$NAME``, defaults to their value."""
    text = UNSET_RE.sub(lambda m: (m.group(1) if m.group(1).startswith("$") else "$" + m.group(1)).replace(_NBSP, " "),
                         text)
    return plain(text)


def defaulted_names(text: str) -> list[str]:
    """Names whose ``${NAME:-default}`` default ``text`` relies on."""
    return [m[0] for m in DEF_RE.findall(text)]


def plain(text: str) -> str:
    """``text`` with the default markers removed (values kept); unresolved markers kept."""
    return DEF_RE.sub(lambda m: m.group(2), text)

