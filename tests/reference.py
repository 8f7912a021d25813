"""A deliberately naive reference implementation of the partition, written from the definition
in plain Python (no polars, no shared code with the package): used to check the real thing.

It walks the sorted boundaries of all GPU intervals of one window and classifies every
elementary segment by priority compute > recompute > comm > other > idle.
"""

from __future__ import annotations


def partition(intervals: list[tuple[int, int, str]], w0: int, w1: int) -> dict[str, int]:
    """intervals: (start_ns, end_ns, cls) with cls in compute/recompute/comm/other."""
    clipped = [(max(s, w0), min(e, w1), c) for s, e, c in intervals if min(e, w1) > max(s, w0)]
    cuts = sorted({w0, w1, *[s for s, _, _ in clipped], *[e for _, e, _ in clipped]})
    out = dict.fromkeys(["compute", "recompute", "exposed_comm", "other", "idle", "overlapped_comm"], 0)
    for a, b in zip(cuts, cuts[1:]):
        active = {c for s, e, c in clipped if s <= a and e >= b}
        if "compute" in active:
            out["compute"] += b - a
        elif "recompute" in active:
            out["recompute"] += b - a
        elif "comm" in active:
            out["exposed_comm"] += b - a
        elif "other" in active:
            out["other"] += b - a
        else:
            out["idle"] += b - a
        if "comm" in active and ({"compute", "recompute"} & active):
            out["overlapped_comm"] += b - a
    return out
