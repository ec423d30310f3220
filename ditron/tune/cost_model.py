"""A roofline cost model for the TP GEMMs, used when no tuned decision is cached.

``T_gemm = 2 M N K / peak_flops`` (bounded below by the bytes it moves over memory
bandwidth), ``T_comm = bytes moved per rank / link bandwidth + latency``. Overlapping hides
``min(T_gemm, T_comm)`` at best and costs the overlapped op some GPU time (``overhead`` of
the GEMM time plus a ``fixed`` cost: chunk signals, the separate own-rows copy or sum). A
call also takes at least its host time (``host_overlap``: the overlapped op issues more
work than ``host_serial``, cuBLAS + NCCL), which decides for small GEMMs. Overlap pays when

    max(max(T_gemm, T_comm) + overhead * T_gemm + fixed, host_overlap)
        < (1 - margin) * max(T_gemm + T_comm, host_serial)

by a ``margin`` that covers the model's error. Small GEMMs (the GEMM-RS regression of
REFERENCES.md) fall back to cuBLAS + NCCL. Where the persistent GEMM is slower than cuBLAS
(:func:`gemm_slowdown`: fp32, operands whose loads cannot be vectorized) the overlapped op's
GEMM takes that many times ``T_gemm``.
"""

from __future__ import annotations

import dataclasses

from ..runtime.integers import check_int


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    peak_flops: float  # dense 16-bit FLOP/s
    fp32_flops: float  # cuBLAS's IEEE fp32 FLOP/s (no TF32)
    mem_bw: float  # bytes/s
    link_bw: float  # bytes/s one way, per rank
    latency: float  # seconds per collective
    overhead: float = 0.03  # fraction of T_gemm lost by the overlapped op
    fixed: float = 40e-6  # seconds of GPU time the overlapped op adds
    host_overlap: float = 350e-6  # host seconds per overlapped call
    host_serial: float = 100e-6  # host seconds per cuBLAS + NCCL call
    margin: float = 0.1  # overlap must beat the serial estimate by this fraction


# Calibrated on 2 H200s (docs/perf.md, sessions 7-9): the persistent GEMM is 0.99-1.01x
# cuBLAS; method="overlap" untuned took 1.00-1.06x T_gemm on the large REFERENCES.md shapes
# and 27-45 us more than cuBLAS on the GPU on the small ones, with 330-430 us of host time
# per call against ~100 for cuBLAS + NCCL.
# fp32: cuBLAS ran 8192 x 1376 x 4096 at 45 TFLOP/s on an H200 (session 56).
H200 = DeviceSpec(peak_flops=700e12, fp32_flops=45e12, mem_bw=4.3e12, link_bw=370e9,
                  latency=30e-6, overhead=0.01, margin=0.02)
#: the persistent GEMM's time over cuBLAS's on operands whose pointer loads cannot be
#: vectorized (``kernels.gemm.scalar_loads``), the worst measured (an H200, bf16, session
#: 56: 1.18x with a row-major ``[4096, 50257]`` weight, 2.56-2.58x at K = 4100)
SCALAR_LOADS_SLOWDOWN = 2.6
#: the same for fp32 operands, which it multiplies on FMA units (an H200, session 56:
#: 2.5x at 8192 x 1376 x 4096 with ``b = w.t()``; session 57: 2.49-2.54x on four GEMM shapes)
FP32_SLOWDOWN = 2.5
#: not measured: the H200's figures scaled by the data sheets. An H100 has the same
#: tensor cores and NVLink and 3.35 TB/s of HBM against 4.8; an H800's NVLink carries
#: 400 GB/s both ways against 900.
H100 = dataclasses.replace(H200, mem_bw=H200.mem_bw * 3.35 / 4.8)
H800 = dataclasses.replace(H100, link_bw=H200.link_bw * 400 / 900)
GENERIC_GPU = DeviceSpec(peak_flops=200e12, fp32_flops=20e12, mem_bw=1.5e12, link_bw=100e9,
                         latency=30e-6)


def gemm_slowdown(itemsize: int, scalar_loads: bool) -> float:
    """The persistent GEMM's time over cuBLAS's for operands of ``itemsize`` bytes whose
    loads vectorize or not (``scalar_loads``); 1 where it is near cuBLAS (16-bit, aligned:
    0.96-1.02x on the REFERENCES.md per-rank shapes)."""
    return max(SCALAR_LOADS_SLOWDOWN if scalar_loads else 1.0,
               FP32_SLOWDOWN if itemsize > 2 else 1.0)


def spec_for(device_name: str) -> DeviceSpec:
    """The figures of the GPU named ``device_name`` (``torch.cuda.get_device_name``);
    :data:`GENERIC_GPU` for one the model does not know."""
    name = device_name.upper()
    for model, spec in (("H200", H200), ("H100", H100), ("H800", H800)):
        if model in name:
            return spec
    return GENERIC_GPU


@dataclasses.dataclass(frozen=True)
class Estimate:
    t_gemm: float
    t_comm: float
    t_overlap: float
    margin: float = 0.0
    host_serial: float = 0.0

    @property
    def t_serial(self) -> float:
        return max(self.t_gemm + self.t_comm, self.host_serial)

    @property
    def pays(self) -> bool:
        return self.t_overlap < (1.0 - self.margin) * self.t_serial


def estimate(op: str, M: int, N: int, K: int, world_size: int, itemsize: int,
             spec: DeviceSpec, gemm_slowdown: float = 1.0) -> Estimate:
    """Estimate for ``op`` in ``ag_gemm``/``gemm_rs``/``gemm_ar`` with the *global* M and the
    per-rank GEMM ``[M, K] @ [K, N]`` (AG: K full, N local; RS/AR: K local); the overlapped
    op's GEMM takes ``gemm_slowdown`` times cuBLAS's ``t_gemm``. ``ValueError`` for a
    size below 0, a world size or itemsize below 1, or an unknown op."""
    if op not in ("ag_gemm", "gemm_rs", "gemm_ar"):
        raise ValueError(f"unknown op {op!r}")
    for name, value, least in (("M", M, 0), ("N", N, 0), ("K", K, 0),
                               ("world_size", world_size, 1), ("itemsize", itemsize, 1)):
        check_int(value, f"estimate: {name}", least)
    flops = 2.0 * M * N * K
    mem = (M * K + K * N + M * N) * itemsize
    peak = spec.fp32_flops if itemsize > 2 else spec.peak_flops
    t_gemm = max(flops / peak, mem / spec.mem_bw)
    frac = (world_size - 1) / world_size
    if op == "ag_gemm":
        nbytes = M * K * itemsize * frac
    elif op == "gemm_rs":
        nbytes = M * N * itemsize * frac
    else:
        nbytes = 2 * M * N * itemsize * frac
    t_comm = nbytes / spec.link_bw + spec.latency
    t_ours = gemm_slowdown * t_gemm
    t_overlap = max(max(t_ours, t_comm) + spec.overhead * t_ours + spec.fixed,
                    spec.host_overlap)
    return Estimate(t_gemm, t_comm, t_overlap, spec.margin, spec.host_serial)


def overlap_pays(op: str, M: int, N: int, K: int, world_size: int, itemsize: int,
                 backend: str, device_name: str = "", gemm_slowdown: float = 1.0) -> bool:
    """The cost model's decision. World size 1: never (nothing to overlap). CPU backend:
    always (the overlapped path is what the CPU backend exists to run and test)."""
    if world_size <= 1:
        return False
    if backend == "cpu":
        return True
    spec = spec_for(device_name)
    return estimate(op, M, N, K, world_size, itemsize, spec, gemm_slowdown).pays
