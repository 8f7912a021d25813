"""The what-if model: a measured (or published) step, re-derived term by term for another layout.

Public surface:

* :func:`apply_sets` — ``["pp=2", "recompute=selective", ...]`` -> a new, validated
  :class:`~traceanalyzer.model.config.RunConfig` (a bad key is a usage error, exit 2; a bad value
  or an impossible layout a configuration error, exit 7; both name the key);
* :func:`anchor_from_config` -> :class:`Anchor` (the published or analytic per-GPU step split
  into terms, seconds per step);
* :func:`project` — an anchor and a new configuration -> a plain dict (every term before and
  after, the rule that moved it, step time, TFLOP/s/GPU, MFU, memory);
* :func:`result_frame` — a :func:`project` result as a polars frame, one row for the anchor and
  one for the predicted layout.

The model takes numbers and configurations, never a trace: the anchor of a measured run
(:func:`traceanalyzer.reconciliation.anchor.anchor_from_analysis`) and the Python verb that
takes an analysis (:func:`traceanalyzer.reconciliation.anchor.whatif`) are the reconciler's.

An anchor is the per-GPU step of one run, split into terms (seconds per optimizer step, mean over
ranks and steps)::

    compute_<family>   model FLOPs' compute, by GEMM family: attn_linear, attn_core, mlp, logits
                       (``compute`` alone for a model given as forward FLOPs per sample)
    recompute          what activation recompute executes again
    pipeline_imbalance the last stage's extra work (the output layer), waited for by the others
    exposed_comm_<dim> exposed communication by parallel dimension (tp, cp, ep, pp, dp; ``other``
                       for what the trace could not attribute)
    bubble             pipeline bubble
    other              memcpy / memset under no kernel
    idle_<cause>       the remaining idle time, by cause (host_bound, sync, other, ...)

Each term is carried to the new layout by its own rule, always scaling the *measured* time
(never one global efficiency):

* compute_<family>: × (family FLOPs per GPU, new / anchor) — the measured time per FLOP of each
  family is kept (GEMM shape effects of a different TP or micro-batch are not modelled);
* recompute: × (recompute FLOPs per GPU, new / anchor); a run that did not recompute gets the
  new recompute FLOPs at the anchor's measured time per model FLOP;
* pipeline_imbalance: the new compute × (last stage over mean stage − 1);
* exposed_comm_<dim>: measured time × (modelled exposed time, new / anchor), i.e. at the
  bandwidth the anchor measured for that dimension, moved by the change in bytes, in exposed
  share and in bandwidth (group scope, or the nccl-tests curve at the new message size when a
  baseline is given). When the model puts no exposure on the anchor's dimension but the trace
  measured some, the measured share of the modelled *total* time is kept. A dimension the anchor
  did not have gets the analytic time. Context parallelism's ring attention is modelled as
  hidden under the attention core's compute only: its exposed time is what its KV transfers
  take beyond that;
* bubble: the new busy time × (p−1)/(v·m) × (the anchor's measured bubble over its own
  (p−1)/(v·m) × busy time; 1 when the anchor had no pipeline);
* other and idle_<cause>: × (microbatches × layers per GPU, new / anchor) — they follow the
  number of kernel launches;
* exposed_comm_other: kept.

Without a trace the anchor is the analytic model of the configuration (:func:`predict`), its
kernel efficiency implied by the ``[reported]`` throughput when there is one (a published run),
else the peak; the result says so (``anchor_source``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from traceanalyzer.errors import ConfigError, TraceAnalyzerError
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops
from traceanalyzer.model.hardware import bandwidths, peak_tflops
from traceanalyzer.model.parallel import bubble_fraction, comm_volumes
from traceanalyzer.model.predict import pipeline_imbalance, predict

FAMILIES = ("attn_linear", "attn_core", "mlp", "logits")
#: an anchor (or a prediction) whose GPU waits for the host this share of the step is host-bound
HOST_BOUND_SHARE = 0.10
DIMS = ("tp", "cp", "ep", "pp", "dp")


class SetUsageError(TraceAnalyzerError):
    """A ``--set`` that is not ``KEY=VALUE`` or names no known key: a usage error (exit 2)."""

    exit_code = 2


# ------------------------------------------------------------------------------------ --set
#: --set key -> (section, field, kind); kind: "int", "bool", or a tuple of choices
SET_KEYS: dict[str, tuple[str, str, Any]] = {
    "tp": ("parallel", "tp", "int"), "pp": ("parallel", "pp", "int"), "vp": ("parallel", "vp", "int"),
    "dp": ("parallel", "dp", "int"), "cp": ("parallel", "cp", "int"), "ep": ("parallel", "ep", "int"),
    "sequence_parallel": ("parallel", "sequence_parallel", "bool"),
    "distributed_optimizer": ("parallel", "distributed_optimizer", "bool"),
    "tp_comm_overlap": ("parallel", "tp_comm_overlap", "bool"),
    "overlap_grad_reduce": ("parallel", "overlap_grad_reduce", "bool"),
    "overlap_param_gather": ("parallel", "overlap_param_gather", "bool"),
    "micro_batch": ("batch", "micro_batch", "int"), "global_batch": ("batch", "global_batch", "int"),
    "recompute": ("recompute", "granularity", ("none", "selective", "full", "mlp")),
    "recompute_method": ("recompute", "method", ("uniform", "block")),
    "recompute_num_layers": ("recompute", "num_layers", "int"),
    "num_gpus": ("hardware", "num_gpus", "int"), "gpus_per_node": ("hardware", "gpus_per_node", "int"),
    "seq_length": ("model", "seq_length", "int"),
    "grad_allreduce": ("parallel", "grad_allreduce", "bool"),
}
_SET_ALIASES = {
    "sp": "sequence_parallel", "mbs": "micro_batch", "micro_batch_size": "micro_batch", "gbs": "global_batch",
    "global_batch_size": "global_batch", "recompute_granularity": "recompute", "gpus": "num_gpus",
    "tensor": "tp", "pipeline": "pp", "data": "dp", "context": "cp", "expert": "ep", "virtual_stages": "vp",
    "use_distributed_optimizer": "distributed_optimizer", "seq": "seq_length", "seq_len": "seq_length",
    "sequence_length": "seq_length",
}
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def _parse_one(item: str) -> tuple[str, str, Any]:
    if "=" not in item:
        raise SetUsageError(f"`sets` {item!r}: expected KEY=VALUE (e.g. `sets` pp=2)")
    raw_key, value = (s.strip() for s in item.split("=", 1))
    key = raw_key.lower().replace("-", "_")
    key = key.split(".", 1)[1] if "." in key else key  # "parallel.pp" -> "pp"
    key = _SET_ALIASES.get(key, key)
    if key not in SET_KEYS:
        raise SetUsageError(f"`sets` {raw_key}: unknown key; known keys: {', '.join(SET_KEYS)}")
    _section, _field, kind = SET_KEYS[key]
    v = value.lower()
    if kind == "int":
        try:
            out: Any = int(v)
        except ValueError:
            raise ConfigError(f"`sets` {key}={value}: {key} must be a whole number") from None
        if out < 1:
            raise ConfigError(f"`sets` {key}={value}: {key} must be at least 1")
    elif kind == "bool":
        if v not in _TRUE | _FALSE:
            raise ConfigError(f"`sets` {key}={value}: {key} must be true or false")
        out = v in _TRUE
    else:
        if v not in kind:
            raise ConfigError(f"`sets` {key}={value}: {key} must be one of {', '.join(kind)}")
        out = v
    return key, value, out


def apply_sets(cfg: RunConfig, sets: list[str] | dict[str, Any]) -> RunConfig:
    """``cfg`` with the ``--set KEY=VALUE`` changes applied, validated.

    Keys: :data:`SET_KEYS` (``tp pp vp dp cp ep micro_batch global_batch seq_length recompute
    recompute_method recompute_num_layers sequence_parallel distributed_optimizer tp_comm_overlap
    overlap_grad_reduce overlap_param_gather grad_allreduce num_gpus gpus_per_node``;
    ``parallel.pp`` and a few aliases such as ``sp``, ``mbs``, ``gbs`` are accepted).
    ``seq_length`` keeps the global batch in sequences (tokens per step follow). The GPU count stays unless ``dp`` or
    ``num_gpus`` is set: changing TP, PP or CP then re-derives DP. A dict ``{"pp": 2}`` is taken as
    the same list.

    Raises :class:`SetUsageError` (exit 2) for a malformed item or an unknown key and
    :class:`~traceanalyzer.errors.ConfigError` (exit 7) for a bad value or a layout that does not
    hold together (e.g. PP not dividing the layers), naming the key.
    """
    items = [f"{k}={v}" for k, v in sets.items()] if isinstance(sets, dict) else list(sets)
    parsed = [_parse_one(i) for i in items]
    changes: dict[str, dict[str, Any]] = {}
    for key, _raw, val in parsed:
        sec, fld, _ = SET_KEYS[key]
        changes.setdefault(sec, {})[fld] = val
    keys = {k for k, _, _ in parsed}
    gpus = cfg.num_gpus
    par = changes.setdefault("parallel", {})
    hw = changes.setdefault("hardware", {})
    if "dp" not in keys and "num_gpus" not in keys and keys & {"tp", "pp", "cp"}:
        par["dp"] = None
        if gpus is not None:
            hw["num_gpus"] = gpus
    elif "dp" in keys and "num_gpus" not in keys:
        hw["num_gpus"] = None  # the GPU count follows tp·pp·cp·dp
    elif "num_gpus" in keys and "dp" not in keys:
        par["dp"] = None
    if changes.get("recompute", {}).get("granularity") in ("none", "selective", "mlp"):
        changes["recompute"].setdefault("num_layers", None)
    new = cfg
    for sec, vals in changes.items():
        if vals:
            new = replace(new, **{sec: replace(getattr(new, sec), **vals)})
    new = replace(new, reported=type(cfg.reported)(), logged=None, warnings=(),
                  name=f"{cfg.name or cfg.source} with " + ", ".join(f"{k}={r}" for k, r, _ in parsed) if parsed
                  else cfg.name)
    what = ", ".join(f"{k}={r}" for k, r, _ in parsed)
    try:
        new = new.validate()
        if new.model.layers and new.model.fwd_flops_per_sample is None and new.model.layers % (new.parallel.pp * new.parallel.vp):
            raise ConfigError(f"[model] layers = {new.model.layers} is not a multiple of pp·vp = "
                              f"{new.parallel.pp}·{new.parallel.vp}")
        if new.parallel.sequence_parallel and new.parallel.tp == 1:
            raise ConfigError("sequence_parallel needs tp > 1")
        if new.parallel.vp > 1 and new.parallel.pp < 2:
            raise ConfigError(f"vp = {new.parallel.vp} (interleaved pipeline) needs pp > 1")
        if new.microbatches is not None and new.microbatches < 1:
            raise ConfigError(f"[batch] global_batch = {new.batch.global_batch} is smaller than dp·micro_batch")
    except ConfigError as exc:
        raise ConfigError(f"`sets` {what}: {exc.message}") from None
    return new


# ------------------------------------------------------------------------------------ anchors
@dataclass(frozen=True)
class Anchor:
    """One run's per-GPU step, split into terms (seconds per optimizer step, mean over ranks)."""

    cfg: RunConfig
    terms: dict[str, float]
    source: str  # "trace" | "reported" | "analytic"
    description: str
    convention: str
    peak_tflops: float
    notes: tuple[str, ...] = ()
    baseline: Any = field(default=None, compare=False)
    #: the trace's compute kernels by family (:func:`traceanalyzer.reconciliation.anchor.kernel_families`):
    #: when set, the compute terms are ``compute_<family>`` and move by their drivers
    kernels: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def step_s(self) -> float:
        return sum(self.terms.values())


def is_transformer(cfg: RunConfig) -> bool:
    return cfg.model.fwd_flops_per_sample is None


def _family_flops(cfg: RunConfig, conv: str) -> dict[str, float]:
    """Model FLOPs per GPU per step by family, and the recompute FLOPs per GPU."""
    fl = step_flops(cfg, conv)
    g = cfg.need(cfg.num_gpus, "[hardware] num_gpus", "the FLOPs per GPU")
    if not is_transformer(cfg):
        return {"compute": fl.model / g, "recompute": fl.recompute / g}
    return {**{f: getattr(fl, f) / g for f in FAMILIES}, "recompute": fl.recompute / g}


def split_compute(cfg: RunConfig, conv: str, compute_s: float) -> dict[str, float]:
    ff = _family_flops(cfg, conv)
    fams = [k for k in ff if k != "recompute"]
    total = sum(ff[k] for k in fams)
    if total <= 0:
        return {"compute": compute_s}
    return {f"compute_{k}" if k != "compute" else "compute": compute_s * ff[k] / total for k in fams}


def anchor_from_config(cfg: RunConfig, *, convention: str | None = None, baseline: Any = None,
                       kernel_efficiency: float | None = None) -> Anchor:
    """The analytic model of ``cfg`` as an anchor (no trace).

    With ``[reported]`` (a published or logged throughput) the compute time is what that figure
    implies (kernel efficiency solved for, as :func:`predict` does); otherwise the compute runs at
    ``kernel_efficiency`` (default: the peak) — the result is then a pure analytic prediction.
    """
    p = predict(cfg, convention=convention, baseline=baseline, kernel_efficiency=kernel_efficiency)
    t = p["times_s"]
    terms = split_compute(cfg, p["convention"], t["compute_model"])
    terms["recompute"] = t["recompute"]
    terms["pipeline_imbalance"] = t["pipeline_imbalance"]
    for d in DIMS:
        terms[f"exposed_comm_{d}"] = t.get(f"exposed_comm_{d}", 0.0)
    terms["bubble"] = t["bubble"]
    src = "reported" if p["kernel_efficiency_source"].startswith("implied") else "analytic"
    desc = (f"published/logged run: {cfg.name or cfg.source} (compute at {p['kernel_efficiency']:.3f} of peak, implied by "
            f"its reported {p['reported']['tflops_per_gpu_in_convention']:.1f} TFLOP/s/GPU)" if src == "reported" and p["reported"]
            else f"analytic model of {cfg.name or cfg.source} (no trace; compute at {p['kernel_efficiency']:.3f} of peak, "
                 f"{p['kernel_efficiency_source']})")
    return Anchor(cfg, terms, src, desc, p["convention"], p["hardware"]["peak_tflops"],
                  tuple(p["warnings"]), baseline)


def peak_of(cfg: RunConfig) -> float:
    hw = cfg.hardware
    return peak_tflops(hw.gpu, hw.precision, hw.peak_tflops)


# ------------------------------------------------------------------------------------ scaling
def _comm_model(cfg: RunConfig, baseline: Any) -> dict[str, dict[str, float]]:
    """Per dimension: modelled total and exposed time (s), exposed bytes, and a label."""
    out: dict[str, dict[str, float]] = {}
    if not is_transformer(cfg):
        return out
    comms = comm_volumes(cfg)
    if baseline is not None:
        from traceanalyzer.model.commcurve import with_baseline  # noqa: PLC0415

        comms = with_baseline(comms, cfg, baseline)
    for c in comms:
        d = out.setdefault(c.dim, {"time_s": 0.0, "exposed_s": 0.0, "exposed_bytes": 0.0, "bytes": 0.0, "gbps": c.gbps,
                                   "scope": c.scope})
        d["time_s"] += c.time_s
        d["exposed_s"] += c.exposed_s
        d["exposed_bytes"] += c.exposed_bytes
        d["bytes"] += c.bytes
    return out


def _launches(cfg: RunConfig) -> float:
    m = cfg.microbatches or 1
    if not is_transformer(cfg) or not cfg.model.layers:
        return float(m)
    return m * cfg.model.layers / cfg.parallel.pp


def _dp_ring(cfg: RunConfig) -> float:
    d = cfg.dp or 1
    return (d - 1) / d if d > 1 else 0.0


def project(anchor: Anchor, new: RunConfig, *, memory: bool = True, capacity_gib: float | None = None,
            reserve_gib: float | None = None) -> dict[str, Any]:
    """Carry every term of ``anchor`` to the layout ``new`` (see the module docstring for the rules).

    Returns a plain dict: ``terms`` (list of {term, anchor_s, predicted_s, delta_s, rule}),
    ``anchor`` / ``predicted`` summaries (layout, step_time_s, tflops_per_gpu, hw_tflops_per_gpu,
    mfu, hfu, memory: :func:`memory_summary` unless ``memory`` is false), ``waterfall`` (the change of TFLOP/s/GPU split into the terms' time
    changes, exactly) and ``notes``.
    """
    old = anchor.cfg
    conv = anchor.convention
    a = anchor.terms
    ff_old, ff_new = _family_flops(old, conv), _family_flops(new, conv)
    model_old = sum(v for k, v in ff_old.items() if k != "recompute")
    model_new = sum(v for k, v in ff_new.items() if k != "recompute")
    compute_keys = [k for k in a if k.startswith("compute")]
    t_compute_old = sum(a[k] for k in compute_keys)
    sec_per_flop = t_compute_old / model_old if model_old > 0 else 0.0
    rows: list[dict[str, Any]] = []
    notes = list(anchor.notes)

    def add(term: str, new_s: float, rule: str) -> None:
        rows.append({"term": term, "anchor_s": a.get(term, 0.0), "predicted_s": new_s, "rule": rule})

    scaled = None
    if anchor.kernels is not None:
        from traceanalyzer.model.shapescale import extrapolation, scale_families  # noqa: PLC0415

        scaled = scale_families({k[len("compute_"):]: a[k] for k in compute_keys}, old, new)
        notes += [f"extrapolated: {x}" for x in extrapolation(old, new, anchor.kernels)]
    for k in compute_keys:
        fam = k[len("compute_"):] if k != "compute" else "compute"
        fo, fn = ff_old.get(fam, 0.0), ff_new.get(fam, 0.0)
        if scaled is not None and fam in scaled:
            add(k, scaled[fam][0], f"{fam} kernels of the trace {scaled[fam][1]}")
        elif fo > 0:
            add(k, a[k] * fn / fo, f"× {fam} FLOPs per GPU {fn / fo:.4g}×")
        else:
            add(k, fn * sec_per_flop, "new FLOPs at the anchor's time per model FLOP")
    r_old, r_new = ff_old["recompute"], ff_new["recompute"]
    if a.get("recompute", 0.0) > 0 and r_old > 0:
        add("recompute", a["recompute"] * r_new / r_old, f"× recompute FLOPs per GPU {r_new / r_old:.4g}× "
                                                         f"({old.recompute.granularity} → {new.recompute.granularity})")
    elif anchor.kernels is not None and model_old > 0:
        # the forward work itself (matmuls, attention, elementwise), not the per-step optimizer
        fwd_rate = sum(a.get(f"compute_{f}", 0.0) for f in ("gemm", "attention", "elementwise")) / model_old
        add("recompute", r_new * fwd_rate, f"{new.recompute.granularity} recompute FLOPs at the anchor's time per model "
                                           "FLOP of its matmul, attention and elementwise kernels")
    else:
        add("recompute", r_new * sec_per_flop, f"{new.recompute.granularity} recompute FLOPs at the anchor's time per model FLOP")
    t_c_new = sum(r["predicted_s"] for r in rows)
    imb_new = pipeline_imbalance(step_flops(new, conv), new.parallel.pp) if is_transformer(new) else 1.0
    add("pipeline_imbalance", t_c_new * (imb_new - 1), f"compute × (last stage / mean stage − 1) = {imb_new - 1:.4f}")

    cm_old, cm_new = _comm_model(old, anchor.baseline), _comm_model(new, anchor.baseline)
    # ring attention (CP) hides its KV transfers under the attention computation only: what is
    # longer than the attention core is exposed
    core_key = "compute_attention" if "compute_attention" in a else "compute_attn_core"
    core_new = next((r["predicted_s"] for r in rows if r["term"] == core_key), 0.0)
    for cm, core in ((cm_old, a.get(core_key, 0.0)), (cm_new, core_new)):
        if "cp" in cm:
            cm["cp"]["exposed_s"] = max(0.0, cm["cp"]["time_s"] - core)
            cm["cp"]["exposed_bytes"] = cm["cp"]["exposed_s"] * cm["cp"]["gbps"] * 1e9
    for d in DIMS:
        key = f"exposed_comm_{d}"
        meas = a.get(key, 0.0)
        o, n_ = cm_old.get(d), cm_new.get(d)
        if not is_transformer(new):
            if d == "dp" and meas > 0:
                r_o, r_n = _dp_ring(old), _dp_ring(new)
                bw = _scope_bw(old, "dp"), _scope_bw(new, "dp")
                f = (r_n / r_o) * (bw[0] / bw[1]) if r_o > 0 else 0.0
                add(key, meas * f, f"× ring factor (d−1)/d {r_n:.3f}/{r_o:.3f} and bandwidth of the group's scope")
            else:
                add(key, meas, "kept (no communication model for a per-sample model)")
            continue
        if n_ is None:
            add(key, 0.0, f"no {d.upper()} in the new layout")
        elif o is not None and o["exposed_s"] > 0:
            f = n_["exposed_s"] / o["exposed_s"]
            bw = o["exposed_bytes"] / meas / 1e9 if meas > 0 else None
            who = "measured" if anchor.source == "trace" else "anchor"
            add(key, meas * f, (f"{who} at {bw:.0f} GB/s effective" if bw else f"{who}: 0 exposed (all hidden)")
                + f"; × modelled exposed time {f:.4g}× ({n_['scope']}, {n_['gbps']:.0f} GB/s)")
        elif o is not None and o["time_s"] > 0 and meas > 0:
            frac = meas / o["time_s"]
            add(key, frac * n_["time_s"], f"measured exposed share {frac:.3f} of the modelled time, kept")
        elif meas > 0 and o is None:
            add(key, n_["exposed_s"], "analytic (the model had no such dimension for the anchor)")
        else:
            add(key, n_["exposed_s"], f"analytic: {n_['exposed_bytes'] / 1e9:.3g} GB exposed at {n_['gbps']:.0f} GB/s "
                                      f"({n_['scope']})")
    if "exposed_comm_other" in a:
        add("exposed_comm_other", a["exposed_comm_other"], "kept (not attributed to a dimension)")

    t_tp_new = next(r["predicted_s"] for r in rows if r["term"] == "exposed_comm_tp")
    busy_new = t_c_new + t_c_new * (imb_new - 1) + t_tp_new
    m_old, m_new = old.microbatches or 1, new.microbatches or 1
    frac_old = bubble_fraction(old.parallel.pp, m_old, old.parallel.vp)
    frac_new = bubble_fraction(new.parallel.pp, m_new, new.parallel.vp)
    busy_old = t_compute_old + a.get("recompute", 0.0) + a.get("pipeline_imbalance", 0.0) + a.get("exposed_comm_tp", 0.0)
    k = 1.0
    if a.get("bubble", 0.0) > 0 and frac_old > 0 and busy_old > 0:
        k = a["bubble"] / (busy_old * frac_old)
    add("bubble", busy_new * frac_new * k, f"busy × (p−1)/(v·m) = {frac_new:.4f}" + (f" × measured/modelled {k:.3f}" if k != 1.0 else ""))
    lr = _launches(new) / _launches(old)
    hb_old = a.get("idle_host_bound", 0.0)
    host_paced = anchor.kernels is not None and hb_old > HOST_BOUND_SHARE * anchor.step_s
    busy_keys = [k for k in a if k != "idle_host_bound" and not k.startswith("idle")]
    for key in [t for t in a if t == "other" or t.startswith("idle")]:
        if key == "idle_host_bound" and host_paced:
            # a host-bound anchor: the GPU waited for the host, whose pace per step (its busy time +
            # that wait) follows the launches; the GPU waits only where its new work is shorter
            pace = (sum(a[k] for k in busy_keys) + hb_old) * lr
            busy = sum(r["predicted_s"] for r in rows) + sum(a[k] * lr for k in a if k.startswith("idle") and k != key)
            add(key, max(0.0, pace - busy), f"host pace {1e3 * pace:.3f} ms per step (the anchor's busy + host wait "
                                            f"× launches {lr:.4g}×) beyond the GPU's work")
        else:
            add(key, a[key] * lr, f"× microbatches·layers per GPU {lr:.4g}× (kernel launches)")

    lr = _launches(new) / _launches(old)
    step_old, step_new = anchor.step_s, sum(r["predicted_s"] for r in rows)
    host_bound = None
    hb_new = next((r["predicted_s"] for r in rows if r["term"] == "idle_host_bound"), 0.0)
    if anchor.kernels is not None and hb_new > HOST_BOUND_SHARE * step_new:
        host_bound = step_new
        notes.append(f"HOST-BOUND: the GPU waits {1e3 * hb_new:.2f} ms of the predicted {1e3 * step_new:.2f} ms step for the "
                     "host; the step is the host's pace, not the GPU's work (fewer, larger kernels — CUDA graphs, "
                     "torch.compile — or a larger micro-batch)")
    elif anchor.kernels is not None and anchor.kernels.get("host_launch_s"):
        # the host launches about as many kernels per step whatever the batch (per layer and
        # micro-batch): a GPU step shorter than the host's launch time cannot be reached
        host_new = anchor.kernels["host_launch_s"] * lr
        if host_new > step_new:
            host_bound = host_new
            notes.append(f"HOST-BOUND: the GPU work predicted ({1e3 * step_new:.2f} ms) is shorter than the host's time to "
                         f"launch it ({1e3 * host_new:.2f} ms per step, measured on the anchor): the step is the host's "
                         "(fewer, larger kernels — CUDA graphs, torch.compile — or a larger micro-batch)")
            add("idle_host_launch", host_new - step_new, "the host's launch time beyond the GPU work (host-bound)")
            step_new = host_new
    for r in rows:
        r["delta_s"] = r["predicted_s"] - r["anchor_s"]
    peak = anchor.peak_tflops
    new_peak = peak_of(new) if (new.hardware.gpu, new.hardware.precision) != (old.hardware.gpu, old.hardware.precision) else peak

    def summary(cfg: RunConfig, step: float, model_gpu: float, rec_gpu: float, pk: float) -> dict[str, Any]:
        p = cfg.parallel
        tf = model_gpu / step / 1e12 if step > 0 else float("nan")
        return {
            "layout": {"gpus": cfg.num_gpus, "tp": p.tp, "pp": p.pp, "vp": p.vp, "dp": cfg.dp, "cp": p.cp, "ep": p.ep,
                       "micro_batch": cfg.batch.micro_batch, "global_batch": cfg.batch.global_batch,
                       "microbatches": cfg.microbatches, "recompute": cfg.recompute.granularity,
                       "sequence_parallel": p.sequence_parallel, "distributed_optimizer": p.distributed_optimizer},
            "step_time_s": step, "tflops_per_gpu": tf, "hw_tflops_per_gpu": (model_gpu + rec_gpu) / step / 1e12,
            "mfu": tf / pk, "hfu": (model_gpu + rec_gpu) / step / 1e12 / pk,
            "memory": memory_summary(cfg, capacity_gib, reserve_gib) if memory else None,
        }

    s_old = summary(old, step_old, model_old, r_old, peak)
    s_new = summary(new, step_new, model_new, r_new, new_peak)
    # the change in TFLOP/s/GPU split into the terms' time changes (exact; FLOPs per GPU may change too)
    y_old, y_new = s_old["tflops_per_gpu"], s_new["tflops_per_gpu"]
    wf: list[dict[str, Any]] = []
    if model_new != model_old:
        y_mid = model_new / step_old / 1e12
        wf.append({"term": "FLOPs per GPU (GPU count or batch)", "tflops": y_mid - y_old})
        base = y_mid
    else:
        base = y_old
    dT = step_new - step_old
    for r in rows:
        share = (r["delta_s"] / dT) * (y_new - base) if abs(dT) > 0 else 0.0
        if abs(r["delta_s"]) > 0:
            wf.append({"term": r["term"], "tflops": share})
    return {
        "anchor_source": anchor.source, "anchor": anchor.description,
        "convention": conv if is_transformer(old) else "per-sample", "peak_tflops": peak,
        "anchor_summary": s_old, "predicted": s_new, "terms": rows, "waterfall": wf,
        "host_bound": host_bound is not None, "notes": list(dict.fromkeys(notes)),
    }


def _scope_bw(cfg: RunConfig, dim: str) -> float:
    intra, inter = bandwidths(cfg.hardware.gpu, cfg.hardware.intra_node_gbps, cfg.hardware.inter_node_gbps)
    span = cfg.parallel.tp * cfg.parallel.cp * (cfg.dp or 1)
    return intra if span <= cfg.hardware.gpus_per_node else inter


# ------------------------------------------------------------------------------------ memory
def memory_summary(cfg: RunConfig, capacity_gib: float | None = None, reserve_gib: float | None = None) -> dict[str, Any] | None:
    """Per-GPU memory of ``cfg`` (:func:`traceanalyzer.model.memory.estimate_memory`, the most
    loaded pipeline stage) in GiB, against ``capacity_gib`` (default: the GPU's, ``[hardware]
    memory_gb``) less ``reserve_gib`` (default: the memory model's reserve). None when the memory
    model cannot size this configuration (e.g. a model given as FLOPs per sample)."""
    from traceanalyzer.model.memory import DEFAULT_RESERVE_GIB, GIB, estimate_memory  # noqa: PLC0415

    try:
        est = estimate_memory(cfg)
    except (ConfigError, ValueError, TypeError, ZeroDivisionError):
        return None
    res = DEFAULT_RESERVE_GIB if reserve_gib is None else reserve_gib
    cap = capacity_gib if capacity_gib is not None else (est.capacity_bytes / GIB if est.capacity_bytes else None)
    out: dict[str, Any] = {"total_gib": est.total_bytes / GIB, "stage": est.stage,
                           "components_gib": {k: v / GIB for k, v in est.components.items()},
                           "capacity_gib": cap, "reserve_gib": res, "margin_gib": None, "fits": None}
    if cap is not None:
        out["margin_gib"] = cap - res - est.total_bytes / GIB
        out["fits"] = out["margin_gib"] >= 0
    return out


# ------------------------------------------------------------------------------------ result
def result_frame(res: dict[str, Any]) -> pl.DataFrame:
    """The two-row frame of the what-if verb (:func:`traceanalyzer.whatif`) from a :func:`project` result."""
    recs = []
    for scen, s, col in (("anchor", res["anchor_summary"], "anchor_s"), ("predicted", res["predicted"], "predicted_s")):
        mem = s.get("memory") or {}
        rec = {"scenario": scen, "anchor_source": res["anchor_source"], **s["layout"],
               "step_time_s": s["step_time_s"], "tflops_per_gpu": s["tflops_per_gpu"],
               "hw_tflops_per_gpu": s["hw_tflops_per_gpu"], "mfu": s["mfu"], "hfu": s["hfu"],
               "memory_gib": mem.get("total_gib"), "margin_gib": mem.get("margin_gib"), "fits": mem.get("fits")}
        rec.update({f"{r['term']}_ms": 1e3 * r[col] for r in res["terms"]})
        recs.append(rec)
    return pl.DataFrame(recs, infer_schema_length=None).with_columns(
        pl.col("memory_gib", "margin_gib").cast(pl.Float64), pl.col("fits").cast(pl.Boolean))

