"""The one number formatter of the renderers: durations in one unit per column, never ``-0.0``.

* :func:`column_unit` — the unit of a column of nanoseconds: the largest of s, ms, µs, ns in which
  the column's largest value is at least 1, so that a column never mixes ``ms`` and ``µs``; the
  unit goes in the heading (``total ms``) and every cell of the column is a plain number in it.
* :func:`duration` — one duration on its own (prose, a finding): three significant digits in
  the unit that suits it (``30.9 µs``, ``12.3 ms``); the same value reads the same everywhere.
* :func:`fixed` — a number with ``decimals`` decimals, where a value that rounds to zero is
  ``0.0``, never ``-0.0``.
* :func:`byte_column` — a column of byte counts in one unit (B, KiB, MiB, GiB), as
  :func:`column` does for durations.
"""

from __future__ import annotations

from typing import Iterable

#: (name, nanoseconds per unit), largest first
UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))


def fixed(v: float | int | None, decimals: int = 3, missing: str = "-") -> str:
    """``v`` with ``decimals`` decimals (thousands not grouped); ``-0.0`` is ``0.0``."""
    if v is None:
        return missing
    text = f"{float(v):.{decimals}f}"
    if text.startswith("-") and float(text) == 0:
        text = text[1:]
    return text


def signed(v: float | int | None, decimals: int = 3, missing: str = "-") -> str:
    """``v`` with its sign and thousands grouped (``+1,234.500``); a value that rounds to zero
    is ``0.000``, never ``-0.000`` or ``+0.000``."""
    if v is None:
        return missing
    text = f"{float(v):+,.{decimals}f}"
    return text[1:] if float(text.replace(",", "")) == 0 else text


def column_unit(values_ns: Iterable[float | int | None]) -> tuple[str, float, int]:
    """(unit name, ns per unit, decimals) for a column of nanoseconds: the unit in which its
    largest value is at least 1 (ms for a column of zeros), and decimals that give that largest
    value three or four significant digits (none in ns)."""
    top = max((abs(float(v)) for v in values_ns if v is not None), default=0.0)
    if top == 0:
        return "ms", 1e6, 3
    for name, scale in UNITS:
        if top >= scale or name == "ns":
            x = top / scale
            decimals = 0 if name == "ns" else 3 if x < 10 else 2 if x < 100 else 1 if x < 1000 else 0
            return name, scale, decimals
    raise AssertionError("unreachable")  # pragma: no cover


def column(values_ns: list[float | int | None], missing: str = "-") -> tuple[str, list[str]]:
    """(unit name, the cells) of a column of nanoseconds, all in that one unit."""
    unit, scale, decimals = column_unit(values_ns)
    return unit, [missing if v is None else fixed(v / scale, decimals) for v in values_ns]


def duration(ns: float | int | None, missing: str = "-") -> str:
    """One duration with its unit, three significant digits: ``812 ns``, ``30.9 µs``, ``12.3 ms``,
    ``1.20 s``."""
    if ns is None:
        return missing
    v = float(ns)
    for name, scale in UNITS:
        x = v / scale
        if round(abs(x), 2) >= 1 or name == "ns":  # 999,996 ns is 1.00 ms, not 1000 µs
            if name == "ns":
                return f"{fixed(x, 0)} ns"
            decimals = 2 if round(abs(x), 2) < 10 else 1 if round(abs(x), 1) < 100 else 0
            return f"{fixed(x, decimals)} {name}"
    raise AssertionError("unreachable")  # pragma: no cover


#: (name, bytes per unit), largest first
BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


def byte_column(values: list[int | None], missing: str = "") -> tuple[str, list[str]]:
    """(unit name, the cells) of a column of byte counts, all in the one unit in which its
    largest value is at least 1 (B for a column of zeros): one decimal, none in B."""
    top = max((abs(int(v)) for v in values if v is not None), default=0)
    name, scale = next(((n, s) for n, s in BYTE_UNITS if top >= s), ("B", 1))
    decimals = 0 if name == "B" else 1
    return name, [missing if v is None else fixed(v / scale, decimals) for v in values]
