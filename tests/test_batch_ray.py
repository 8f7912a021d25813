"""The Ray engine on a real local Ray instance gives the same store as the local engine."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.store import Store, run_batch

from conftest import DEMO, DLRM

ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'traceanalyzer[ray]')")

VOLATILE = ["analysed_at", "seconds", "write_id"]  # when, how long, which write: the only columns allowed to differ


def test_ray_engine_matches_local_engine(tmp_path):
    root = tmp_path / "runs"
    for day in ("2026-11-18", "2026-11-19"):
        (root / f"resnet-{day}").mkdir(parents=True)
        shutil.copy(DEMO, root / f"resnet-{day}" / DEMO.name)
    shutil.copytree(DLRM, root / "dlrm" / "2026-11-19")
    (root / "bad-2026-11-19").mkdir()
    (root / "bad-2026-11-19" / "rank0.json").write_text('{"traceEvents": [')
    local = run_batch([root], tmp_path / "local", workers=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.cluster_resources().get("CPU") == 2
        remote = run_batch([root], tmp_path / "ray", engine="ray")
    finally:
        ray.shutdown()
    assert remote.analysed == local.analysed == ["dlrm/2026-11-19", "resnet-2026-11-18", "resnet-2026-11-19"]
    assert remote.failed == local.failed and local.failed[0]["exit_code"] == 4
    for table in ("runs", "ranks", "steps"):
        a = Store(tmp_path / "local").read(table).drop(VOLATILE, strict=False)
        b = Store(tmp_path / "ray").read(table).drop(VOLATILE, strict=False)
        assert a.height > 0
        assert_frame_equal(a.sort(pl.all()), b.sort(pl.all()))
