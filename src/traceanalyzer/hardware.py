"""Hardware figures: dense peak FLOP/s per precision and link bandwidths.

Public surface: :data:`GPUS` (key -> :class:`GpuSpec`), :func:`detect_gpu` (a device name as it
appears in a trace, e.g. ``"NVIDIA H100 80GB HBM3"`` -> ``"h100_sxm"``), :func:`gpu_spec`,
:func:`peak_tflops` and :func:`bandwidths` (both honour the overrides of ``[hardware]``).

Every peak is the **dense** figure: NVIDIA data sheets print the 2:4-sparse number first for
Ampere and later (H100 SXM BF16: 1979 sparse, 989.4 dense); Megatron's maintainers confirm 989 is
the MFU denominator (NVIDIA/Megatron-LM#1276). torchtitan shipped the sparse B200 figure (4.5e15)
for two months in 2025 before "fix wrong b200 flops number (#1393)" set 2.25e15.

Bandwidths are GB/s per GPU per direction. ``nvlink_gbps`` is the line rate; the *effective*
collective bus bandwidth used for time estimates defaults to ``BUS_EFFICIENCY`` × line rate
(NCCL's maintainer: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get an
effective NVLink bandwidth of 370GB/s", nccl-tests#212). ``net_gbps`` is the scale-out NIC per GPU
(400 Gb/s NDR = 50 GB/s on DGX H100-class; 200 Gb/s HDR = 25 GB/s on DGX A100).
Sources: NVIDIA data sheets via https://glennklockwood.com/garden/processors/h100 and
.../B200, AMD MI300X data sheet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traceanalyzer.errors import ConfigError

BUS_EFFICIENCY = 0.82  # 450 GB/s line -> ~370 GB/s NCCL busbw on H100 (nccl-tests#212)


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    peak_tflops: dict[str, float]  # dense, per precision; missing = not supported in hardware
    hbm_gbps: float
    nvlink_gbps: float  # per direction, line rate (PCIe cards: the PCIe/bridge rate)
    net_gbps: float  # scale-out per GPU per direction, typical system


GPUS: dict[str, GpuSpec] = {
    g.key: g
    for g in [
        # V100: 125 TFLOP/s fp16 tensor core (SXM2), 112 (PCIe); no bf16/tf32. NVLink2 300 GB/s bidir.
        GpuSpec("v100_sxm", "Tesla V100 SXM2", {"fp16": 125.0, "fp32": 15.7}, 900, 150, 12.5),
        GpuSpec("v100_pcie", "Tesla V100 PCIe", {"fp16": 112.0, "fp32": 14.0}, 900, 16, 12.5),
        # A100: 312 bf16/fp16 dense (624 sparse), tf32 156, fp32 19.5; NVLink3 600 GB/s bidir.
        GpuSpec("a100", "NVIDIA A100 (SXM4/PCIe)", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, 2039, 300, 25),
        # H100 SXM5: bf16 989.4, fp8 1978.9, tf32 494.7, fp32 66.9 (dense); NVLink4 900 GB/s bidir.
        GpuSpec("h100_sxm", "NVIDIA H100 SXM", {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9}, 3350, 450, 50),
        # H100 PCIe: bf16 756 dense (1513 sparse), fp8 1513, tf32 378, fp32 51.2; NVLink bridge 600 bidir.
        GpuSpec("h100_pcie", "NVIDIA H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp8": 1513.0, "tf32": 378.0, "fp32": 51.2}, 2000, 300, 50),
        # H800 SXM: H100 die, NVLink cut to 400 GB/s bidir.
        GpuSpec("h800", "NVIDIA H800 SXM", {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9}, 3350, 200, 50),
        # H200 SXM: same die and peaks as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
        GpuSpec("h200", "NVIDIA H200 SXM", {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9}, 4800, 450, 50),
        # B200 (HGX, 1000 W): bf16 2250 dense (4500 sparse), fp8 4500, tf32 1100; NVLink5 1.8 TB/s bidir.
        GpuSpec("b200", "NVIDIA B200 (HGX)", {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "tf32": 1100.0, "fp32": 75.0}, 8000, 900, 50),
        # B200 in GB200 (1200 W): bf16 2500, fp8 5000.
        GpuSpec("gb200", "NVIDIA GB200 (B200 @1200 W)", {"bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0, "tf32": 1250.0, "fp32": 80.0}, 8000, 900, 50),
        # MI300X: bf16/fp16 1307.4 dense (2614.9 sparse), fp8 2614.9, tf32 653.7, fp32 matrix 163.4;
        # 7 Infinity Fabric links x 64 GB/s per direction.
        GpuSpec("mi300x", "AMD Instinct MI300X", {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "tf32": 653.7, "fp32": 163.4}, 5300, 448, 50),
        # MI250X/MI250: each GCD is one device in a trace; per-GCD = half the OAM figure (383 / 362.1).
        GpuSpec("mi250x", "AMD Instinct MI250X (one GCD)", {"bf16": 191.5, "fp16": 191.5, "fp32": 47.9}, 1638, 200, 25),
        GpuSpec("mi250", "AMD Instinct MI250 (one GCD)", {"bf16": 181.0, "fp16": 181.0, "fp32": 45.3}, 1638, 200, 25),
    ]
}

# Ordered: the first pattern that matches wins (more specific names first).
_PATTERNS: list[tuple[str, str]] = [
    (r"gb200", "gb200"),
    (r"b200", "b200"),
    (r"h200", "h200"),
    (r"h800", "h800"),
    (r"h100.*pcie", "h100_pcie"),
    (r"h100", "h100_sxm"),
    (r"a100|a800", "a100"),
    (r"v100.*pcie", "v100_pcie"),
    (r"v100", "v100_sxm"),
    (r"mi300x|mi300", "mi300x"),
    (r"mi250x", "mi250x"),
    (r"mi250", "mi250"),
]


def detect_gpu(device_name: str | None) -> str | None:
    """Key of :data:`GPUS` for a device name as written in a trace or config; None if unknown.

    >>> detect_gpu("NVIDIA H100 80GB HBM3"), detect_gpu("Tesla V100-SXM2-32GB")
    ('h100_sxm', 'v100_sxm')
    """
    if not device_name:
        return None
    name = device_name.strip().lower()
    if name in GPUS:
        return name
    for pattern, key in _PATTERNS:
        if re.search(pattern, name):
            return key
    return None


def gpu_spec(device_name: str) -> GpuSpec:
    key = detect_gpu(device_name)
    if key is None:
        raise ConfigError(
            f"unknown GPU {device_name!r}: give [hardware] peak_tflops (dense) or one of "
            + ", ".join(g.name for g in GPUS.values())
        )
    return GPUS[key]


def peak_tflops(gpu: str | None, precision: str = "bf16", override: float | None = None) -> float:
    """Dense peak TFLOP/s of one GPU at ``precision`` (``override`` wins when given)."""
    if override is not None:
        return float(override)
    if gpu is None:
        raise ConfigError("[hardware] gpu is missing: it is needed for the peak FLOP/s (MFU denominator); "
                          "or give [hardware] peak_tflops")
    spec = gpu_spec(gpu)
    if precision not in spec.peak_tflops:
        raise ConfigError(f"{spec.name} has no {precision} tensor-core peak in the table "
                          f"(has {', '.join(spec.peak_tflops)}): set [hardware] precision or peak_tflops")
    return spec.peak_tflops[precision]


def bandwidths(gpu: str | None, intra_override: float | None = None, inter_override: float | None = None) -> tuple[float, float]:
    """(intra-node collective bus bandwidth, inter-node per-GPU bandwidth) in GB/s."""
    spec = GPUS.get(detect_gpu(gpu) or "")
    intra = intra_override if intra_override is not None else (spec.nvlink_gbps * BUS_EFFICIENCY if spec else None)
    inter = inter_override if inter_override is not None else (spec.net_gbps if spec else None)
    if intra is None or inter is None:
        raise ConfigError("[hardware] gpu is missing or unknown: it is needed for the communication time "
                          "(or give [hardware] intra_node_gbps and inter_node_gbps)")
    return float(intra), float(inter)


# --------------------------------------------------------------------------- device memory
#: bytes in a GiB, the unit every memory size is shown in
GIB = 2**30
#: Device memory per GPU key, GiB (2**30 bytes), the nominal size of the part. A size written in
#: the device name ("A100-SXM4-40GB", "V100-SXM2-16GB") wins over this table.
MEMORY_GIB: dict[str, float] = {
    "v100_sxm": 32, "v100_pcie": 32, "a100": 80, "h100_sxm": 80, "h100_pcie": 80, "h800": 80,
    "h200": 141, "b200": 180, "gb200": 186, "mi300x": 192, "mi250x": 64, "mi250": 64,
}
_SIZE_IN_NAME = re.compile(r"(\d{2,3})\s*gb\b", re.I)


def memory_bytes(gpu: str | None, override_gib: float | None = None) -> int:
    """Device memory of one GPU in bytes: ``override_gib`` (``[hardware] memory_gb``), else the
    size written in the device name, else :data:`MEMORY_GIB`.

    >>> memory_bytes("NVIDIA A100-SXM4-40GB") // 2**30, memory_bytes("H100 SXM") // 2**30
    (40, 80)
    """
    if override_gib is not None:
        return int(override_gib * 2**30)
    if gpu:
        m = _SIZE_IN_NAME.search(gpu)
        if m:
            return int(m.group(1)) * 2**30
    key = detect_gpu(gpu)
    if key is None:
        raise ConfigError("[hardware] gpu is missing or unknown: it is needed for the device memory "
                          "(or give [hardware] memory_gb)")
    return int(MEMORY_GIB[key] * 2**30)
