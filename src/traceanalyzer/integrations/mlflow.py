"""``log_to="mlflow"``: each trace's per-step numbers as metrics of the active MLflow run, and its
HTML report as an artifact (under ``traceanalyzer/``)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("traceanalyzer.integrations")

#: metric name of each per-step number: ``traceanalyzer.<bucket>_ms`` (``duration_ms``: the step)
PREFIX = "traceanalyzer."


class MlflowLogger:
    """Called with each trace's summary (in the handler's thread). The run it logs to is the one
    active in training's thread when :meth:`bind` is called there (the callbacks call it at every
    step until a run is active)."""

    def __init__(self) -> None:
        try:
            import mlflow  # noqa: F401
        except ImportError as exc:
            raise ImportError("log_to='mlflow' needs MLflow: pip install 'traceanalyzer[mlflow]' (or mlflow)") from exc
        self.run_id: str | None = None
        self.logged: list[tuple[str, float, int]] = []

    def bind(self) -> None:
        if self.run_id is None:
            import mlflow

            run = mlflow.active_run()
            if run is not None:
                self.run_id = run.info.run_id

    def __call__(self, summary: dict[str, Any]) -> None:
        if self.run_id is None or summary.get("status") != "ok":
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
        for step in summary.get("steps") or []:
            for key, value in step.items():
                if key != "step" and value is not None:
                    client.log_metric(self.run_id, PREFIX + key, float(value), step=int(step["step"]))
                    self.logged.append((PREFIX + key, float(value), int(step["step"])))
        if summary.get("report"):
            client.log_artifact(self.run_id, summary["report"], artifact_path="traceanalyzer")
