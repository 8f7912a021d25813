"""Launch scripts and training logs as users hand them over, read as docs/errors.md says.

* a script saved with Windows (CRLF) line endings: the configuration of the same script with
  LF endings, one warning that says CRLF, never a raw carriage return in a message;
* no message of the script / log reader carries a raw control character;
* a ``#`` comment mid-line hides the rest of the line, as bash does: the options after it are
  not read, and what is then missing is refused (exit 7);
* an arguments block inside a long log reads exactly as the block alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import ROOT, run_cli
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import load_config
from traceanalyzer.model.megatron import read_megatron

DATA = ROOT / "tests" / "data" / "megatron"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _crlf(tmp_path, name: str):
    lf = (DATA / name).read_bytes()
    assert b"\r" not in lf
    p = tmp_path / name
    p.write_bytes(lf.replace(b"\n", b"\r\n"))
    return p


@pytest.mark.parametrize("name", ["llama3_8b_fp8_like.sh", "mixtral_moe_like.sh", "oneflow_gpt_2d_pp_arguments.log"])
def test_crlf_file_reads_as_the_same_file_with_lf_endings(tmp_path, name):
    p = _crlf(tmp_path, name)
    lf = read_megatron((DATA / name).read_text(), str(p))
    crlf = read_megatron(p.read_bytes().decode(), str(p))
    assert (crlf.model, crlf.batch, crlf.parallel, crlf.recompute, crlf.hardware) == (
        lf.model, lf.batch, lf.parallel, lf.recompute, lf.hardware)
    assert crlf.warnings == (f"{p}: Windows (CRLF) line endings: read as the same file with LF endings", *lf.warnings)
    assert crlf.unresolved == lf.unresolved


def test_crlf_script_on_the_command_line_one_notice_and_no_carriage_return(tmp_path):
    script = _crlf(tmp_path, "llama3_8b_fp8_like.sh")
    lf = tmp_path / "lf.sh"
    lf.write_bytes((DATA / "llama3_8b_fp8_like.sh").read_bytes())
    hw = tmp_path / "hw.toml"
    hw.write_text('[hardware]\ngpu = "H100-SXM"\n')
    a = run_cli("predict", "--megatron-args", lf, "--config", hw, "--format", "json")
    b = run_cli("predict", "--megatron-args", script, "--config", hw, "--format", "json")
    assert b.returncode == a.returncode == 0, b.stderr
    assert "\r" not in b.stderr and "\r" not in b.stdout
    extra = [ln for ln in b.stderr.splitlines() if ln not in a.stderr.replace(str(lf), str(script)).splitlines()]
    assert extra == [f"warning: {script}: Windows (CRLF) line endings: read as the same file with LF endings"]
    # the refusal of a script that cannot run is the LF script's, without a carriage return
    bad = _crlf(tmp_path, "gpt3_175b_like.sh")
    r = run_cli("predict", "--megatron-args", bad)
    assert r.returncode == 7 and "\r" not in r.stderr
    assert "num_gpus = 8" in r.stderr and "tp·pp·cp = 8·16·1 = 128" in r.stderr


@pytest.mark.parametrize("text", [
    "--num-layers 80 --hidden-size 8192 --pipeline-model-parallel-size 'tw\ro'",
    "--num-layers 80 --hidden-size 8192 --tensor-model-parallel-size 4\r 2\r",
    "--num-layers 8\x1b[2K0 --hidden-size 8192",
    "--num-layers 80 --hidden-size 8192 --global-batch-size \"1\r\n\"",
    "  num_layers ...... 80\r\n  hidden_size ...... 8192\n  num_layers ...... 9\x1b[31m6\n  seq_length ..... 4\r096\n"
    "  micro_batch_size ..... 1\n",
])
def test_no_reader_message_carries_a_raw_control_character(tmp_path, text):
    f = tmp_path / "args.sh"
    f.write_bytes(text.encode())
    try:
        cfg = load_config(megatron_args=f)
        messages = list(cfg.warnings)
    except ConfigError as exc:
        messages = [str(exc)]
    assert messages
    for m in messages:
        assert not CONTROL.search(m), repr(m)
    r = run_cli("predict", "--megatron-args", f)
    assert not CONTROL.search(r.stderr.replace("\n", "")), repr(r.stderr)


MID_LINE = """#!/bin/bash
torchrun --nproc-per-node 8 pretrain_gpt.py \\
  --num-layers 80 --num-attention-heads 64 # 70B shape --hidden-size 8192 \\
  --seq-length 4096 --global-batch-size 64 --bf16
"""


def test_a_comment_mid_line_hides_the_rest_of_the_line_as_bash_does(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(MID_LINE)
    r = run_cli("predict", "--megatron-args", script)
    assert r.returncode == 7
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("traceanalyzer: error: ")
    assert "hidden" in r.stderr  # the option the comment hid is the one missing
    cfg = read_megatron(MID_LINE, str(script))
    assert cfg.model.layers == 80 and cfg.model.heads == 64 and cfg.model.hidden is None
    assert cfg.model.seq_length is None  # the next line is a command of its own: bash runs it as one
    if shutil.which("bash"):
        # bash itself: the arguments torchrun would receive
        shim = f'torchrun() {{ printf "%s\\n" "$@"; }}\n--seq-length() {{ :; }}\nsource {script}\n'
        got = subprocess.run(["bash", "-c", shim], capture_output=True, text=True).stdout.split()
        assert got == ["--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "80", "--num-attention-heads", "64"]


def test_an_arguments_block_inside_a_long_log_reads_as_the_block_alone():
    block = (DATA / "oneflow_gpt_2d_pp_arguments.log").read_text()
    line = (" iteration {i:8d}/  100000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 2800.0 | "
            "learning rate: 1.0E-04 | global batch size:   512 | lm loss: 3.0E+00 |")
    noise = "\n".join(f"[2021-06-01 12:00:00] INFO loading shard {i} of the dataset" for i in range(30_000))
    iters = "\n".join(line.format(i=i, s=512 * i) for i in range(1, 50))
    alone = read_megatron(block, "run.log")
    for text in (block + "\n" + iters + "\n" + noise, noise + "\n" + block + "\n" + iters):
        cfg = read_megatron(text, "run.log")
        assert (cfg.model, cfg.batch, cfg.parallel, cfg.recompute, cfg.hardware.precision) == (
            alone.model, alone.batch, alone.parallel, alone.recompute, alone.hardware.precision)
        assert cfg.logged["step_time_s"] == 2.8 and cfg.logged["global_batch"] == 512
