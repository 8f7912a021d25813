"""What the trainer callbacks share: a ``torch.profiler`` run on a schedule, its traces handed to
:func:`traceanalyzer.integrations.torch.on_trace_ready`, and the optional result logger."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from traceanalyzer.integrations.torch import TraceHandler

log = logging.getLogger("traceanalyzer.integrations")

#: the default schedule: after ``skip_first`` steps, ``active`` profiled steps (one trace) after
#: ``warmup`` steps, every ``every`` steps
DEFAULT_EVERY = 200
DEFAULT_ACTIVE = 3
DEFAULT_WARMUP = 1
DEFAULT_SKIP_FIRST = 10


class ScheduledProfiler:
    """``torch.profiler.profile`` on the schedule above (or ``schedule``, any torch schedule),
    writing through a :class:`TraceHandler`. ``start``/``step``/``stop`` never raise into
    training: a profiler that cannot run is one logged warning and training goes on without it."""

    def __init__(self, dir: str | os.PathLike[str], *, every: int = DEFAULT_EVERY, active: int = DEFAULT_ACTIVE,
                 warmup: int = DEFAULT_WARMUP, skip_first: int = DEFAULT_SKIP_FIRST, repeat: int = 0,
                 schedule: Callable[[int], Any] | None = None, activities: list | None = None,
                 profiler_options: dict[str, Any] | None = None, log_to: str | None = None, **handler_options: Any):
        for name, value, low in (("every", every, 1), ("active", active, 1), ("warmup", warmup, 0), ("skip_first", skip_first, 0),
                                 ("repeat", repeat, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be a whole number of steps, at least {low}, got {value!r}")
        if schedule is None and every < active + warmup:
            raise ValueError(f"every ({every}) must be at least warmup + active ({warmup + active}) steps")
        self.logger = None
        if log_to == "mlflow":
            from traceanalyzer.integrations.mlflow import MlflowLogger

            self.logger = MlflowLogger()
            handler_options.setdefault("report", True)
            handler_options["on_result"] = self.logger
        elif log_to is not None:
            raise ValueError(f"log_to must be 'mlflow' or None, got {log_to!r}")
        self.dir = dir
        self.handler_options = handler_options
        self.every, self.active, self.warmup, self.skip_first, self.repeat = every, active, warmup, skip_first, repeat
        self.schedule = schedule
        self.activities = activities
        self.profiler_options = profiler_options or {}
        self.handler: TraceHandler | None = None
        self.prof: Any = None

    def start(self) -> None:
        try:
            import torch

            self.handler = TraceHandler(self.dir, **self.handler_options)
            schedule = self.schedule or torch.profiler.schedule(
                wait=self.every - self.active - self.warmup, warmup=self.warmup, active=self.active,
                repeat=self.repeat, skip_first=self.skip_first)
            activities = self.activities
            if activities is None:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=self.handler,
                                               **self.profiler_options)
            self.prof.start()
        except Exception as exc:  # noqa: BLE001 - never into training
            log.warning("traceanalyzer: the profiler did not start (training goes on unprofiled): %s", exc)
            self.prof = None

    def step(self) -> None:
        if self.logger is not None:
            self.logger.bind()  # in training's thread, where the tracking run is active
        if self.prof is None:
            return
        try:
            self.prof.step()
        except Exception as exc:  # noqa: BLE001
            log.warning("traceanalyzer: the profiler failed (training goes on unprofiled): %s", exc)
            self.prof = None

    def stop(self) -> None:
        prof, self.prof = self.prof, None
        try:
            if prof is not None:
                prof.on_trace_ready = None  # a cycle still open when training ends is not saved
                prof.stop()
        except Exception as exc:  # noqa: BLE001
            log.warning("traceanalyzer: the profiler did not stop cleanly: %s", exc)
        if self.handler is not None:
            self.handler.close()

    @property
    def results(self) -> list[dict[str, Any]]:
        """Each trace's summary, in order (see :class:`TraceHandler`)."""
        return self.handler.results if self.handler is not None else []
