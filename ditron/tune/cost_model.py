"""A roofline cost model for the TP GEMMs, used when no tuned decision is cached.

``T_gemm = 2 M N K / peak_flops`` (bounded below by the bytes it moves over memory
bandwidth), ``T_comm = bytes moved per rank / link bandwidth + latency``. Overlapping hides
``min(T_gemm, T_comm)`` at best and costs the overlapped kernel some efficiency
(``overhead`` of the GEMM time, plus a fixed launch/synchronisation cost). Overlap pays when

    max(T_gemm, T_comm) + overhead * T_gemm + fixed  <  (1 - margin) * (T_gemm + T_comm)

i.e. when the communication hidden exceeds what the overlapped kernel loses, by a margin
that covers the model's error (a wrong "overlap" costs more than a wrong "fallback"). Small GEMMs
(the GEMM-RS regression of REFERENCES.md) fall back to cuBLAS + NCCL.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    peak_flops: float  # dense 16-bit FLOP/s
    mem_bw: float  # bytes/s
    link_bw: float  # bytes/s one way, per rank
    latency: float  # seconds per collective
    overhead: float = 0.03  # fraction of T_gemm lost by the overlapped kernel
    fixed: float = 15e-6  # seconds of extra launches / signalling
    margin: float = 0.1  # overlap must beat the serial estimate by this fraction


# overhead 0.5: our persistent GEMM ran at 0.48-0.87x cuBLAS on one H200 (docs/perf.md,
# 2026-11-29), so until it matches cuBLAS the model only picks overlap where the hidden
# communication clearly outweighs that loss; the tuner measures the real trade-off.
H200 = DeviceSpec(peak_flops=700e12, mem_bw=4.3e12, link_bw=370e9, latency=30e-6,
                  overhead=0.5)
GENERIC_GPU = DeviceSpec(peak_flops=200e12, mem_bw=1.5e12, link_bw=100e9, latency=30e-6)


def spec_for(device_name: str) -> DeviceSpec:
    name = device_name.upper()
    if "H200" in name or "H100" in name or "H800" in name:
        return H200
    return GENERIC_GPU


@dataclasses.dataclass(frozen=True)
class Estimate:
    t_gemm: float
    t_comm: float
    t_overlap: float
    margin: float = 0.0

    @property
    def t_serial(self) -> float:
        return self.t_gemm + self.t_comm

    @property
    def pays(self) -> bool:
        return self.t_overlap < (1.0 - self.margin) * self.t_serial


def estimate(op: str, M: int, N: int, K: int, world_size: int, itemsize: int,
             spec: DeviceSpec) -> Estimate:
    """Estimate for ``op`` in ``ag_gemm``/``gemm_rs``/``gemm_ar`` with the *global* M and the
    per-rank GEMM ``[M, K] @ [K, N]`` (AG: K full, N local; RS/AR: K local)."""
    flops = 2.0 * M * N * K
    mem = (M * K + K * N + M * N) * itemsize
    t_gemm = max(flops / spec.peak_flops, mem / spec.mem_bw)
    frac = (world_size - 1) / world_size
    if op == "ag_gemm":
        nbytes = M * K * itemsize * frac
    elif op == "gemm_rs":
        nbytes = M * N * itemsize * frac
    elif op == "gemm_ar":
        nbytes = 2 * M * N * itemsize * frac
    else:
        raise ValueError(f"unknown op {op!r}")
    t_comm = nbytes / spec.link_bw + spec.latency
    t_overlap = max(t_gemm, t_comm) + spec.overhead * t_gemm + spec.fixed
    return Estimate(t_gemm, t_comm, t_overlap, spec.margin)


def overlap_pays(op: str, M: int, N: int, K: int, world_size: int, itemsize: int,
                 backend: str, device_name: str = "") -> bool:
    """The cost model's decision. World size 1: never (nothing to overlap). CPU backend:
    always (the overlapped path is what the CPU backend exists to run and test)."""
    if world_size <= 1:
        return False
    if backend == "cpu":
        return True
    return estimate(op, M, N, K, world_size, itemsize, spec_for(device_name)).pays
