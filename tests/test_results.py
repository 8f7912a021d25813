"""The verbs' result objects (``traceanalyzer.results``): each ``to_dict()`` is the very document
the command writes with ``-f json`` (so a script that used the old ``dict`` and the command line
see the same numbers); the typed fields are that document's values; the old ``dict`` use still
works, warning at the caller's line; the objects are frozen."""

from __future__ import annotations

import dataclasses
import warnings

import orjson
import pytest

import traceanalyzer as ta
from tests.conftest import DLRM, ROOT, run_cli

MI300 = ROOT / "fixtures" / "kineto" / "mi300x_resnet_act_checkpoint_rank0.json.gz"
MI300_CFG = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
CFG_70B = ROOT / "docs" / "examples" / "megatron-readme-70b.toml"


def _json(doc: dict) -> object:
    """A document as ``-f json`` would write and read it back."""
    return orjson.loads(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))


def _fields_match(result) -> None:
    """Every public field of ``result`` is the document's value of that key (None: absent)."""
    doc = result.to_dict()
    for f in dataclasses.fields(result):
        if not f.name.startswith("_"):
            assert getattr(result, f.name) is doc.get(f.name), f.name


def test_plan_is_the_plan_command_document():
    p = ta.plan("15T", params="405B", mfu="38-43%", gpu="H100 SXM", gpus=16384)
    r = run_cli("plan", "--tokens", "15T", "--params", "405B", "--mfu", "38-43%", "--gpu", "H100 SXM", "--gpus", "16384", "-f", "json")
    assert r.returncode == 0, r.stderr
    cli = orjson.loads(r.stdout)["plan"]
    # the same document, its notes in each caller's words: the API's arguments, the command's flags
    assert {**_json(p.to_dict()), "notes": None} == {**cli, "notes": None}
    assert p.notes == ["no `gpu_power_w`: energy left out", "no `price_per_gpu_hour`: cost left out"]
    assert cli["notes"] == ["no --gpu-power-w: energy left out", "no --price-per-gpu-hour: cost left out"]
    _fields_match(p)
    assert ta.PlanResult.from_dict(cli).gpu_hours == cli["gpu_hours"] == _json(p.gpu_hours)
    assert p.total_flops == 6 * 405e9 * 15e12 and p.cost is None and p.energy_mwh is None  # no price, no power given


def test_predict_is_the_predict_command_document():
    p = ta.predict(CFG_70B)
    r = run_cli("predict", "--config", CFG_70B, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert _json(p.to_dict()) == orjson.loads(r.stdout)
    _fields_match(p)
    assert (p.schema, p.prediction["convention"], p.sweep, p.vs) == ("traceanalyzer.predict", "megatron2024", None, None)


def test_reconcile_is_the_reconcile_command_document():
    w = ta.reconcile(MI300, MI300_CFG)
    r = run_cli("reconcile", MI300, "--config", MI300_CFG, "--format", "json")
    assert r.returncode == 0, r.stderr
    cli = orjson.loads(r.stdout)
    assert _json(w.to_dict()) == cli and list(w.to_dict()) == list(cli)  # the same keys, in the same order
    _fields_match(w)
    assert w.peak_tflops == pytest.approx(1307.4) and w.achieved_tflops == pytest.approx(cli["achieved_tflops"])


def test_straggler_view_fields_are_the_verbs_frames():
    v = ta.straggler_view(DLRM)
    assert list(v.to_dict()) == ["ranks", "costs", "total_cost_ms_per_step", "replay", "wait_matrix", "warnings"]
    _fields_match(v)
    assert v.costs.equals(ta.straggler_costs(DLRM)) and v.wait_matrix.equals(ta.wait_matrix(DLRM))
    assert v.replay.equals(ta.replay(DLRM))


def test_the_old_dict_use_warns_at_the_callers_line():
    p = ta.plan("15T", params="405B", mfu=0.4, gpu="H100 SXM")
    with pytest.warns(DeprecationWarning, match=r"indexing \['total_flops'\] of a PlanResult .* use \.total_flops") as got:
        assert p["total_flops"] == p.total_flops
    assert got[0].filename == __file__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "notes" in p and p.get("nope") is None and dict(p) == p.to_dict() and list(p.keys()) == list(p.to_dict())
        assert p["tokens"] == 15e12  # a key that is no field: the message points at to_dict()
    assert caught and all(issubclass(w.category, DeprecationWarning) and w.filename == __file__ for w in caught)
    assert "use .to_dict()" in str(caught[-1].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the typed use never warns
        assert p.total_flops > 0 and p.to_dict()["tokens"] == 15e12 and len(p) == len(p.to_dict())


def test_results_are_frozen_and_to_dict_is_a_copy():
    p = ta.plan("15T", params="405B", mfu=0.4, gpu="H100 SXM")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.total_flops = 0.0  # type: ignore[misc]
    d = p.to_dict()
    d["total_flops"] = 0.0
    assert p.to_dict()["total_flops"] == p.total_flops != 0.0
