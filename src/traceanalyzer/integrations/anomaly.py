"""``keep="anomalous"``: which traces are worth keeping on disk (their rows are stored either way)."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

#: a step slower than this many times the rolling median is anomalous
DEFAULT_SLOW_FACTOR = 1.5
#: the rolling median is over this many of the latest profiled steps (of this rank)
DEFAULT_WINDOW = 20
#: a finding whose loss is at least this share of the mean step makes its trace worth keeping
DEFAULT_FINDING_SHARE = 0.5


class KeepAnomalous:
    """Keep a trace when one of its steps is slower than ``slow_factor`` × the median of the
    last ``window`` profiled steps before it, or when one of its findings costs at least
    ``finding_share`` of the mean step (None: findings never decide), or when it could not be
    analysed (the trace is the evidence). The first trace has no median to compare with: it is
    kept only for a finding."""

    def __init__(self, slow_factor: float = DEFAULT_SLOW_FACTOR, window: int = DEFAULT_WINDOW,
                 finding_share: float | None = DEFAULT_FINDING_SHARE):
        if not (isinstance(slow_factor, (int, float)) and slow_factor > 0):
            raise ValueError(f"slow_factor must be a positive number, got {slow_factor!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a whole number of steps, at least 1, got {window!r}")
        self.slow_factor = float(slow_factor)
        self.finding_share = finding_share
        self.history: deque[float] = deque(maxlen=window)
        self.last_reason: str | None = None

    def __call__(self, summary: dict[str, Any]) -> bool:
        self.last_reason = None
        if summary.get("status") != "ok":
            self.last_reason = "not analysed"
            return True
        durations = [s["duration_ms"] for s in summary.get("steps") or [] if s.get("duration_ms") is not None]
        median = statistics.median(self.history) if self.history else None
        self.history.extend(durations)
        if median is not None:
            slow = [d for d in durations if d > self.slow_factor * median]
            if slow:
                self.last_reason = f"a step of {max(slow):.3f} ms > {self.slow_factor:g} x the median {median:.3f} ms"
                return True
        if self.finding_share is not None:
            for f in summary.get("top_losses") or []:
                if (f.get("share_of_step") or 0) >= self.finding_share:
                    self.last_reason = f"{f.get('label') or f.get('loss')}: {f['share_of_step']:.0%} of the step"
                    return True
        return False
