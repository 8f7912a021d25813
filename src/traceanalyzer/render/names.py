"""Long names (kernels, ops) shortened for a table so that distinct names stay distinct.

C++ kernel names share long prefixes (``void at::native::(anonymous namespace)::...``) and
differ in a template argument far inside, so a plain cut at the table's width shows several
kernels under one name. :func:`shorten` cuts each name to ``width`` characters and, where two
different names would read the same, keeps the part where they differ (``head…differing
part…tail``). Machine outputs (JSON, CSV, Parquet) always carry the full names.
"""

from __future__ import annotations

ELLIPSIS = "…"


def _cut(name: str, width: int) -> str:
    if len(name) <= width:
        return name
    return name[: width - 1] + ELLIPSIS


def _around(name: str, at: int, width: int) -> str:
    """``name`` in ``width`` characters showing its start, the characters from ``at`` on, and its end."""
    if len(name) <= width:
        return name
    head = max(8, width // 4)
    tail = max(6, width // 5)
    mid = width - head - tail - 2  # two ellipses
    start = max(head, min(at - 4, len(name) - tail - mid))
    if start <= head:  # the difference is near the start: one ellipsis before the tail
        return name[: width - tail - 1] + ELLIPSIS + name[-tail:]
    end = start + mid
    if end >= len(name) - tail:
        return name[:head] + ELLIPSIS + name[-(width - head - 1):]
    return name[:head] + ELLIPSIS + name[start:end] + ELLIPSIS + name[-tail:]


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):  # two names, a few hundred characters
        if a[i] != b[i]:
            return i
    return n


def shorten(names: list[str], width: int = 70) -> list[str]:
    """Each of ``names`` in at most ``width`` characters; names that differ stay different
    whenever ``width`` allows (the same name twice stays the same)."""
    out = [_cut(n, width) for n in names]
    for _ in range(3):  # a few passes: a fix can rarely make a new clash
        seen: dict[str, list[int]] = {}
        for i, s in enumerate(out):
            seen.setdefault(s, []).append(i)
        clashes = [ix for ix in seen.values() if len({names[i] for i in ix}) > 1]
        if not clashes:
            break
        for ix in clashes:
            for i in ix:
                others = [names[j] for j in ix if names[j] != names[i]]
                at = min(_first_difference(names[i], o) for o in others)
                back = min(_first_difference(names[i][::-1], o[::-1]) for o in others)
                # the difference is in the tail: keep the tail; else show around where it starts
                out[i] = (_around(names[i], at, width) if back > width // 5 else
                          names[i][: width - max(width // 3, back + 1) - 1] + ELLIPSIS + names[i][-max(width // 3, back + 1):])
    return out
