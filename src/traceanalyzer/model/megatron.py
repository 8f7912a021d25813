"""Megatron-LM launch scripts and training logs -> a run configuration.

Public surface: :func:`read_megatron` (text -> unvalidated :class:`~traceanalyzer.model.config.RunConfig`
carrying its warnings and the values it could not resolve), :func:`parse_iterations` (the
iteration lines of a log -> what the run measured).

Two kinds of input, told apart by their content:

* a **log** that prints Megatron's ``arguments`` block (``  num_layers ........ 80``), with any
  per-line prefix that launchers add (``[default0]:``, ``0:``, ``[rank0]:``, timestamps); its
  iteration lines (``elapsed time per iteration (ms): ... | throughput per GPU (TFLOP/s/GPU):
  ... | global batch size: ...``, or Megatron-DeepSpeed's ``(s)`` and ``TFLOPs:``) give what the
  run measured;
* a NeMo 1.x YAML configuration (``trainer:`` and ``model:`` sections): :mod:`.nemo`;
* a **launch script** or command line, read the way bash would (:mod:`.shell`): the command
  that carries ``--num-layers`` / ``--hidden-size`` is the training command; the options before
  the ``.py`` are the launcher's (``torchrun --nnodes N --nproc-per-node M`` gives the world
  size), those after it Megatron's. A value that comes from a variable set outside the script is
  not guessed: it is recorded as unresolved (an error naming the argument and its line unless
  ``--config`` gives it); a ``${VAR:-default}`` default that a needed value relies on is a
  warning.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import (
    BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig, Reported, RunConfig, TrainingConfig,
)
from traceanalyzer.model.shell import ShellSyntaxError, defaulted_names, plain, run_script, shown, unresolved_names

# The Megatron arguments the model reads, with their kind (int, flag, str) and the RunConfig
# field they set ("section.field"; None: used in the derivation only).
INT, FLAG, STR = "int", "flag", "str"
ARGS: dict[str, tuple[str, str | None]] = {
    "num_layers": (INT, "model.layers"),
    "hidden_size": (INT, "model.hidden"),
    "ffn_hidden_size": (INT, "model.ffn"),
    "num_attention_heads": (INT, "model.heads"),
    "num_query_groups": (INT, "model.kv_heads"),
    "kv_channels": (INT, "model.head_dim"),
    "padded_vocab_size": (INT, "model.vocab"),
    "vocab_size": (INT, "model.vocab"),
    "seq_length": (INT, "model.seq_length"),
    "encoder_seq_length": (INT, "model.seq_length"),
    "num_experts": (INT, "model.experts"),
    "moe_router_topk": (INT, "model.top_k"),
    "moe_ffn_hidden_size": (INT, "model.moe_ffn"),
    "global_batch_size": (INT, "batch.global_batch"),
    "micro_batch_size": (INT, "batch.micro_batch"),
    "tensor_model_parallel_size": (INT, "parallel.tp"),
    "pipeline_model_parallel_size": (INT, "parallel.pp"),
    "data_parallel_size": (INT, "parallel.dp"),
    "context_parallel_size": (INT, "parallel.cp"),
    "expert_model_parallel_size": (INT, "parallel.ep"),
    "virtual_pipeline_model_parallel_size": (INT, "parallel.vp"),
    "num_layers_per_virtual_pipeline_stage": (INT, "parallel.vp"),
    "recompute_num_layers": (INT, "recompute.num_layers"),
    "world_size": (INT, "hardware.num_gpus"),
    "group_query_attention": (FLAG, None),
    "swiglu": (FLAG, "model.activation"),
    "untie_embeddings_and_output_weights": (FLAG, "model.untie_embeddings"),
    "sequence_parallel": (FLAG, "parallel.sequence_parallel"),
    "use_distributed_optimizer": (FLAG, "parallel.distributed_optimizer"),
    "tp_comm_overlap": (FLAG, "parallel.tp_comm_overlap"),
    "overlap_grad_reduce": (FLAG, "parallel.overlap_grad_reduce"),
    "overlap_param_gather": (FLAG, "parallel.overlap_param_gather"),
    "grad_reduce_in_bf16": (FLAG, "parallel.grad_reduce_dtype"),
    "bf16": (FLAG, "hardware.precision"),
    "fp16": (FLAG, "hardware.precision"),
    "fp8": (STR, "hardware.precision"),  # older Megatron: --fp8 e4m3|hybrid (log: fp8 ... hybrid/None)
    "fp8_format": (STR, "hardware.precision"),
    "fp8_hybrid": (FLAG, "hardware.precision"),
    "fp8_e4m3": (FLAG, "hardware.precision"),
    "recompute_activations": (FLAG, "recompute.granularity"),
    "checkpoint_activations": (FLAG, "recompute.granularity"),
    "recompute_granularity": (STR, "recompute.granularity"),
    "recompute_method": (STR, "recompute.method"),
    "activations_checkpoint_method": (STR, "recompute.granularity"),
    "moe_layer_freq": (STR, "model.moe_layer_freq"),
    "rampup_batch_size": (STR, None),
    "position_embedding_type": (STR, "model.position_embedding"),
    "normalization": (STR, "model.norm"),
    "disable_bias_linear": (FLAG, "model.bias"),
    "optimizer": (STR, "training.optimizer"),
}
#: Megatron's spellings of the [model] / [training] values
_POSITION = {"learned_absolute": "learned", "rope": "rope", "mrope": "rope", "yarn": "rope", "none": "none"}
_NORM = {"layernorm": "layernorm", "rmsnorm": "rmsnorm"}
_LAUNCHER = {"nnodes": "hardware.num_gpus", "nproc_per_node": "hardware.num_gpus"}

_ARG_LINE = re.compile(r"(?:^|\s)([a-z_][a-z0-9_]*) \.{3,} (.*?)\s*$")
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \((ms|s)\):\s*([0-9][0-9.eE+-]*)")
_TFLOPS = re.compile(r"(?:throughput per GPU \(TFLOP/s/GPU\)|\bTFLOPs):\s*([0-9][0-9.eE+-]*)")
_GBS = re.compile(r"global batch size:\s*(\d+)")
_INT = re.compile(r"^[+-]?\d+$")
_LAUNCH = re.compile(r"--(?:num[-_]layers|hidden[-_]size)\b")


def _is_log(text: str) -> bool:
    """Whether ``text`` holds a printed arguments block (five ``key ..... value`` lines), wherever
    it is: a long log can print it after tens of thousands of lines."""
    found = 0
    for ln in text.splitlines():
        if _ARG_LINE.search(ln):
            found += 1
            if found >= 5:
                return True
    return False


def parse_iterations(text: str) -> dict[str, Any] | None:
    """Median step time, TFLOP/s per GPU and global batch of the logged iterations.

    The first logged iteration is left out when there are three or more (it carries warm-up);
    iterations logged at a global batch other than the last one (batch ramp-up) are left out.
    """
    rows = []
    for ln in text.splitlines():
        if "iteration" not in ln or "elapsed time per iteration" not in ln:
            continue
        it, el = _ITER.search(ln), _ELAPSED.search(ln)
        if not it or not el:
            continue
        tf, gb = _TFLOPS.search(ln), _GBS.search(ln)
        try:
            step = float(el.group(2)) / (1000.0 if el.group(1) == "ms" else 1.0)
            tfl = float(tf.group(1)) if tf else None
        except ValueError:
            continue
        rows.append((int(it.group(1)), step, tfl, int(gb.group(1)) if gb else None))
    if not rows:
        return None
    # a multi-rank log repeats each line per rank: one row per iteration
    seen: dict[int, tuple] = {}
    for r in rows:
        seen.setdefault(r[0], r)
    rows = [seen[k] for k in sorted(seen)]
    last_gbs = rows[-1][3]
    rows = [r for r in rows if r[3] == last_gbs]
    used = rows[1:] if len(rows) >= 3 else rows
    tfl = [r[2] for r in used if r[2] is not None]
    return {
        "iterations": [r[0] for r in used],
        "step_time_s": statistics.median(r[1] for r in used),
        "tflops_per_gpu": statistics.median(tfl) if tfl else None,
        "global_batch": last_gbs,
    }


def _py_value(text: str) -> Any:
    t = text.strip()
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if t in ("None", "none", ""):
        return None
    return t


def _log_args(text: str, source: str, warnings: list[str]) -> dict[str, tuple[Any, int]]:
    out: dict[str, tuple[Any, int]] = {}
    for n, ln in enumerate(text.splitlines(), 1):
        m = _ARG_LINE.search(ln)
        if not m:
            continue
        key, val = m.group(1), _py_value(m.group(2))
        if key in out and out[key][0] != val and key in ARGS:
            warnings.append(f"{source} line {n}: {key} = {m.group(2).strip()} differs from line {out[key][1]} "
                            f"({out[key][0]}): the first is used (two runs in one log?)")
            continue
        out.setdefault(key, (val, n))
    pv = _PADDED_VOCAB.search(text)
    if pv and out.get("padded_vocab_size", (None,))[0] is None:
        out["padded_vocab_size"] = (pv.group(1), text[:pv.start()].count("\n") + 1)
    return out


def _commands(text: str) -> tuple[list[tuple[int, list[str], list[int]]], list[str]]:
    """Training commands of a script — (number of model arguments, words, lines) of those with
    --num-layers / --hidden-size — and the reader's notes."""
    res = run_script(text)
    cands = []
    for words, lines in res.commands:
        if words and words[0] in ("echo", "printf"):
            continue
        keys = {w[2:].split("=", 1)[0].replace("-", "_") for w in words if w.startswith("--")}
        if keys & {"num_layers", "hidden_size"}:
            cands.append((len(keys & set(ARGS)), words, lines))
    return cands, res.notes


def _cli_args(text: str, source: str, warnings: list[str]) -> dict[str, tuple[Any, int]]:
    """(value, line) of every argument the model reads, from the script's training command."""
    problem = None
    try:
        cands, notes = _commands(text)
    except ShellSyntaxError as exc:
        cands, notes, problem = [], [], exc
    except (RecursionError, ValueError) as exc:
        raise ConfigError(f"{source}: cannot read it as a shell script: {exc}") from None
    if not cands:
        # a log that echoes its launch command (set -x, a printed command line) among lines that
        # are no shell: read the lines with Megatron options alone
        lines = [ln if _LAUNCH.search(ln) else "" for ln in text.splitlines()]
        if 0 < sum(1 for ln in lines if ln) < len(lines):
            try:
                cands, notes = _commands("\n".join(lines))
            except (ShellSyntaxError, RecursionError, ValueError):
                cands = []
            if cands:
                warnings.append(f"{source}: not a shell script as a whole"
                                + (f" (line {problem.line}: {problem})" if problem else "")
                                + "; only the lines with Megatron options were read")
                problem = None
    if problem is not None:
        raise ConfigError(f"{source} line {problem.line}: cannot read it as a shell script: {problem}") from None
    if not cands:
        return {}
    best = max(cands, key=lambda c: c[0])
    _, words, lines = best
    others = [c for c in cands if c is not best and c[1] != words]
    if others:
        warnings.append(f"{source}: {len(cands)} training commands in the script; the one at line {lines[0]} "
                        "(the most Megatron arguments) is read")
    # launcher options (before the training script) vs Megatron's (after it)
    cut = next((k for k, w in enumerate(words) if w.endswith(".py")), -1)
    launcher, meg = (words[:cut], lines[:cut]), (words[cut + 1:], lines[cut + 1:])
    out: dict[str, tuple[Any, int]] = {}
    for (ws, ls), is_launcher in ((launcher, True), (meg, False)):
        k = 0
        while k < len(ws):
            w = ws[k]
            if not w.startswith("--") or len(w) == 2:
                k += 1
                continue
            key, eq, inline = w[2:].partition("=")
            key = key.replace("-", "_")
            line = ls[k]
            vals = [inline] if eq else []
            k += 1
            if not eq:
                while k < len(ws) and not ws[k].startswith("--"):
                    vals.append(ws[k])
                    k += 1
            if is_launcher and key not in _LAUNCHER:
                continue
            if not is_launcher and key not in ARGS:
                continue
            value: Any = True if not vals else vals[0] if len(vals) == 1 else vals
            out[key] = (value, line)
    for note in notes:
        warnings.append(f"{source} {note}")
    return out


def _convert(key: str, raw: Any, line: int, source: str, unresolved: dict[str, str],
             defaults: list[str], log: bool) -> Any:
    """One argument to its Python value; None when it cannot be resolved (recorded)."""
    kind, target = ARGS.get(key, (INT, _LAUNCHER.get(key)))
    flag = f"{key} (line {line})" if log else f"--{key.replace('_', '-')} (line {line})"
    if raw is None:
        return None
    if isinstance(raw, list):
        if key == "rampup_batch_size":
            return [plain(str(v)) for v in raw]
        raise ConfigError(f"{source}: {flag} is given {len(raw)} values ({' '.join(shown(str(v)) for v in raw)}); "
                          "it takes one")
    if raw is True or raw is False:
        if kind == FLAG:
            return raw
        if kind == STR and key in ("fp8", "fp8_format"):
            return None if raw is False else "hybrid"
        raise ConfigError(f"{source}: {flag} has no value; it takes {'a whole number' if kind == INT else 'a value'}")
    text = str(raw)
    names = unresolved_names(text)
    if names:
        what = ", ".join(f"${n}" if not n.startswith("$") else n for n in dict.fromkeys(names))
        unresolved[target or key] = (f"{source}: {flag} is {what}, set outside the script: give the value in the "
                                     f"script or in --config ({target or key})")
        return None
    for d in dict.fromkeys(defaulted_names(text) or []):
        opt = flag.split(" (")[0]
        defaults.append(f"{opt} {plain(text)} (${d}, line {line})")
    text = plain(text).strip().strip("'\"")
    if key in _LAUNCHER and not _INT.match(text):
        unresolved["hardware.num_gpus"] = (f"{source}: {flag} = {text!r}: the GPU count is decided when the job runs; "
                                           "give [hardware] num_gpus in --config")
        return None
    if kind == FLAG:
        if text in ("True", "true", "1"):
            return True
        if text in ("False", "false", "0", "None"):
            return False
        raise ConfigError(f"{source}: {flag} is a switch and takes no value (got {text!r})")
    if kind == STR:
        return text
    if not _INT.match(text):
        try:
            f = float(text)
        except ValueError:
            f = None
        if f is not None and math.isfinite(f) and f == int(f) and abs(f) < 2**63:
            return int(f)
        raise ConfigError(f"{source}: {flag} = {text!r} is not a whole number")
    v = int(text)
    if abs(v) >= 2**63:
        raise ConfigError(f"{source}: {flag} = {text} is beyond 64 bits")
    return v


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\r``, ``\\x1b``...): a raw
    carriage return or escape sequence in a message would overwrite or restyle the terminal line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def read_megatron(text: str, source: str = "megatron arguments") -> RunConfig:
    """Read Megatron-LM launch arguments, a launch script or a training log (not validated).

    A file with Windows (CRLF) line endings is read as the same file with LF endings, said once
    in the warnings. No message (error, warning, unresolved value) carries a raw control
    character: they are escaped (:func:`printable`)."""
    notes = []
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
        notes.append(f"{source}: Windows (CRLF) line endings: read as the same file with LF endings")
    try:
        cfg = _read_megatron(text, source)
    except ConfigError as exc:
        raise ConfigError(printable(exc.message), exc.path) from None
    return replace(
        cfg,
        warnings=tuple(printable(w) for w in (*notes, *cfg.warnings)),
        unresolved=tuple((k, printable(m)) for k, m in cfg.unresolved),
    )


def _read_megatron(text: str, source: str) -> RunConfig:
    from traceanalyzer.model.nemo import is_nemo_yaml, read_nemo  # noqa: PLC0415

    if is_nemo_yaml(text):
        return read_nemo(text, source)
    warnings: list[str] = []
    unresolved: dict[str, str] = {}
    log = _is_log(text)
    if log:
        raw = _log_args(text, source, warnings)
    elif _LAUNCH.search(text):
        raw = _cli_args(text, source, warnings)
    else:  # e.g. a log with iteration lines only: not a script, do not read it as one
        raw = {}
    measured = parse_iterations(text) if "elapsed time per iteration" in text else None
    if not any(k in raw for k in ("num_layers", "hidden_size")) and measured is None:
        raise ConfigError(f"{source}: no Megatron-LM arguments found (expected --num-layers/--hidden-size in a "
                          "launch command, the arguments block of a training log, or its iteration lines)")
    a: dict[str, Any] = {}
    defaults: list[str] = []
    for key, (value, line) in raw.items():
        if key in ARGS or (key in _LAUNCHER and not log):
            a[key] = _convert(key, value, line, source, unresolved, defaults, log)
    if defaults:
        warnings.append(f"{source}: the script's own defaults are used for values it takes from outside it "
                        f"(environment, positional parameters): {', '.join(defaults)}")

    def g(*names: str, default: Any = None) -> Any:
        for n in names:
            if a.get(n) is not None:
                return a[n]
        return default

    world = g("world_size")
    if world is None and not log:
        nn, npn = a.get("nnodes"), a.get("nproc_per_node")
        if nn is None and "nnodes" not in raw and npn is not None:
            nn = 1  # torchrun's (and torch.distributed.launch's) default: one node
        if nn is not None and npn is not None:
            world = nn * npn
        elif "nnodes" in raw or "nproc_per_node" in raw:
            pass  # unresolved: recorded under hardware.num_gpus
    pp = g("pipeline_model_parallel_size", default=1)
    vp = g("virtual_pipeline_model_parallel_size")
    lpv = g("num_layers_per_virtual_pipeline_stage")
    if vp is not None and vp < 1:
        raise ConfigError(f"{source}: virtual_pipeline_model_parallel_size (--virtual-pipeline-model-parallel-size) = {vp} "
                          "must be at least 1 (model chunks per pipeline stage)")
    if lpv is not None and lpv < 1:
        raise ConfigError(f"{source}: num_layers_per_virtual_pipeline_stage (--num-layers-per-virtual-pipeline-stage) = {lpv} "
                          "must be at least 1 (layers in each virtual pipeline stage)")
    if vp is None and lpv and g("num_layers") and pp:
        if g("num_layers") % (pp * lpv):
            raise ConfigError(f"{source}: num_layers = {g('num_layers')} is not a multiple of pipeline stages × "
                              f"layers per virtual stage = {pp}·{lpv}")
        vp = g("num_layers") // (pp * lpv)
    fp8 = g("fp8_format", "fp8")
    if fp8 not in (None, False, "None") or a.get("fp8_hybrid") or a.get("fp8_e4m3"):
        precision = "fp8"
    elif a.get("bf16"):
        precision = "bf16"
    elif a.get("fp16"):
        precision = "fp16"
    else:
        precision = "fp32"
        if raw:
            warnings.append(f"{source}: no --bf16/--fp16/--fp8-format: the run computes in fp32 (Megatron's default)")
    gran = g("recompute_granularity") or "none"
    if a.get("recompute_activations"):
        gran = "selective"  # Megatron: --recompute-activations == --recompute-granularity selective
    if a.get("checkpoint_activations") or g("activations_checkpoint_method"):
        gran = "full"  # the pre-2022 spelling of full recompute
    if isinstance(gran, str):
        gran = gran.lower()
    freq = g("moe_layer_freq", default=1)
    if isinstance(freq, str):
        freq = int(freq) if _INT.match(freq) else 1
    experts = g("num_experts", default=0) or 0
    if g("rampup_batch_size") is not None:
        rb = g("rampup_batch_size")
        warnings.append(f"{source}: --rampup-batch-size {' '.join(rb) if isinstance(rb, list) else rb}: the global "
                        f"batch grows during training; the configuration uses the final {g('global_batch_size')}")
    pos = g("position_embedding_type")
    norm = g("normalization")
    opt = g("optimizer")
    extra_model: dict[str, Any] = {}
    if isinstance(pos, str) and pos.lower() in _POSITION:
        extra_model["position_embedding"] = _POSITION[pos.lower()]
    if isinstance(norm, str) and norm.lower() in _NORM:
        extra_model["norm"] = _NORM[norm.lower()]
    if a.get("disable_bias_linear"):
        extra_model["bias"] = False
    training = TrainingConfig(recipe="megatron-mixed",
                              optimizer=opt.lower() if isinstance(opt, str) and opt.lower() in ("adam", "sgd") else None)
    model = ModelConfig(
        **extra_model,
        layers=g("num_layers"), hidden=g("hidden_size"), ffn=g("ffn_hidden_size"), heads=g("num_attention_heads"),
        kv_heads=g("num_query_groups") if a.get("group_query_attention") else None, head_dim=g("kv_channels"),
        vocab=g("padded_vocab_size", "vocab_size"), seq_length=g("seq_length", "encoder_seq_length"),
        activation="swiglu" if a.get("swiglu") else "gelu", experts=experts,
        top_k=g("moe_router_topk", default=2 if experts else 1), moe_ffn=g("moe_ffn_hidden_size"),
        moe_layer_freq=freq, untie_embeddings=bool(a.get("untie_embeddings_and_output_weights")),
    )
    batch = BatchConfig(global_batch=g("global_batch_size"), micro_batch=g("micro_batch_size", default=1))
    parallel = ParallelConfig(
        tp=g("tensor_model_parallel_size", default=1), pp=pp, dp=g("data_parallel_size"),
        cp=g("context_parallel_size", default=1), ep=g("expert_model_parallel_size", default=1), vp=vp or 1,
        sequence_parallel=bool(a.get("sequence_parallel")), distributed_optimizer=bool(a.get("use_distributed_optimizer")),
        tp_comm_overlap=bool(a.get("tp_comm_overlap")), overlap_grad_reduce=bool(a.get("overlap_grad_reduce")),
        overlap_param_gather=bool(a.get("overlap_param_gather")),
        grad_reduce_dtype="bf16" if a.get("grad_reduce_in_bf16") else "fp32",
    )
    recompute = RecomputeConfig(granularity=gran, method=(g("recompute_method") or "uniform").lower(),
                                num_layers=g("recompute_num_layers"))
    reported = Reported()
    if measured:
        reported = Reported(tflops_per_gpu=measured["tflops_per_gpu"], step_time_s=measured["step_time_s"],
                            convention=None)
        gb = measured["global_batch"]
        if gb is not None and batch.global_batch is not None and gb != batch.global_batch:
            warnings.append(f"{source}: the iterations were logged at global batch {gb}, the arguments say "
                            f"{batch.global_batch} (ramp-up?): the logged figures are read at {gb}")
        if gb is not None:
            batch = replace(batch, global_batch=gb)
    cfg = RunConfig(name=Path(source).stem if source else "", convention="megatron", model=model, batch=batch,
                    parallel=parallel, recompute=recompute, hardware=HardwareConfig(num_gpus=world, precision=precision),
                    reported=reported, training=training, source=source, warnings=tuple(warnings),
                    unresolved=tuple(sorted(unresolved.items())), logged=measured)
    return cfg


def megatron_defaults(cfg: RunConfig) -> RunConfig:
    """Megatron's default global batch (micro batch × DP) when none is given."""
    if cfg.batch.global_batch is None and cfg.dp is not None and not cfg.unresolved_keys & {"parallel.dp", "hardware.num_gpus", "batch.micro_batch"}:
        return replace(cfg, batch=replace(cfg.batch, global_batch=cfg.batch.micro_batch * cfg.dp))
    return cfg
