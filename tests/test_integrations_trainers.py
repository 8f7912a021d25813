"""The trainer callbacks (Lightning, Hugging Face) on a 3-step CPU training, and the MLflow
logger on a real H200 trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import TRACES, needs_extra, run_cli
from traceanalyzer.store.database import Store
from traceanalyzer.integrations.torch import STORE_DIR

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"
#: every step profiled, one trace each
EVERY_STEP = {"every": 1, "active": 1, "warmup": 0, "skip_first": 0}


def _check_store(log: Path, error_class: str = "NoGpuActivity") -> None:
    runs = Store(log / STORE_DIR).runs()
    # a CPU-only trace has no GPU time: one status row per profiled step, as breakdown says (exit 5)
    assert runs.height == 3, runs
    assert runs["status"].unique().to_list() == ["failed"]
    assert runs["error_class"].unique().to_list() == [error_class]
    traces = sorted(p for p in log.iterdir() if p.name.endswith(".pt.trace.json.gz"))
    assert len(traces) == 3


def _lightning_fit(tmp_path: Path, **options):
    import lightning.pytorch as L
    import torch

    from traceanalyzer.integrations.lightning import TraceAnalyzerCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    callback = TraceAnalyzerCallback(tmp_path / "log", run_id="lit", **EVERY_STEP, **options)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
                        default_root_dir=tmp_path)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    return trainer.global_step, callback


def _hf_train(tmp_path: Path, **options):
    import torch
    import transformers

    from traceanalyzer.integrations.hf import TraceAnalyzerCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    torch.manual_seed(0)
    data = [{"x": torch.randn(8), "labels": torch.randn(1)} for _ in range(32)]
    callback = TraceAnalyzerCallback(tmp_path / "log", run_id="hf", **EVERY_STEP, **options)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                                          disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    return trainer.state.global_step, callback




#: the two trainers' integrations, each run for three steps: (global step, callback)
TRAINERS = [pytest.param(_lightning_fit, marks=needs_extra("lightning"), id="lightning"),
            pytest.param(_hf_train, marks=needs_extra("hf"), id="hf")]


@pytest.mark.parametrize("train", TRAINERS)
def test_callback_profiles_three_steps_into_the_store(tmp_path, train):
    steps, callback = train(tmp_path)
    assert steps == 3
    _check_store(tmp_path / "log")
    assert [r["profiler_step"] for r in callback.results] == [1, 2, 3]


@pytest.mark.parametrize("train", TRAINERS)
def test_training_goes_on_when_the_analysis_fails(tmp_path, monkeypatch, train):
    monkeypatch.setenv("TRACEANALYZER_FAULT", "loop:analysis")
    steps, _ = train(tmp_path)
    assert steps == 3
    _check_store(tmp_path / "log", "InternalError")


class RecordedProfiler:
    def __init__(self, source: Path, step_num: int):
        self.source, self.step_num = source, step_num

    def export_chrome_trace(self, path: str) -> None:
        shutil.copyfile(self.source, path)


@needs_extra("mlflow")
@pytest.mark.skipif(not SMALL.exists(), reason=f"shared H200 traces not found at {SMALL.parent}")
def test_mlflow_logger_logs_each_step_and_the_report_of_a_real_trace(tmp_path, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    from traceanalyzer.integrations.mlflow import MlflowLogger
    from traceanalyzer.integrations.torch import on_trace_ready

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a file store: mlflow-skinny has no database backend
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    logger = MlflowLogger()
    with mlflow.start_run() as run:
        logger.bind()
        handler = on_trace_ready(tmp_path / "log", run_id="m", report=True, on_result=logger)
        handler(RecordedProfiler(SMALL, 4))
        handler.close()
    cli = run_cli("breakdown", SMALL, "-f", "json")
    steps = json.loads(cli.stdout)["ranks"][0]["steps"]
    history = MlflowClient().get_metric_history(run.info.run_id, "traceanalyzer.duration_ms")
    # ms are the JSON's µs / 1000 (to the last bit or so: polars divides by multiplying)
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [s["step"] for s in steps]
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx([s["duration_us"] / 1000 for s in steps], rel=1e-12)
    idle = MlflowClient().get_metric_history(run.info.run_id, "traceanalyzer.idle_ms")
    assert [m.value for m in sorted(idle, key=lambda m: m.step)] == pytest.approx([s["idle_us"] / 1000 for s in steps], rel=1e-12)
    (artifact,) = MlflowClient().list_artifacts(run.info.run_id, "traceanalyzer")
    assert artifact.path.endswith(".pt.trace.json.gz.report.html")
    assert Path(handler.results[0]["report"]).read_text().lstrip().lower().startswith("<!doctype html")
