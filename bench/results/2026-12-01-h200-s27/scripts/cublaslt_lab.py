"""``out = c + a @ b`` by cuBLASLt with ``c`` and ``out`` apart: ``c`` may be any device
memory the GPU can read, a peer's buffer included, and is read once, by the GEMM's epilogue.

``torch.addmm(c, a, b, out=out)`` copies ``c`` into ``out`` before its GEMM (a pass over
``c`` on the SMs); cuBLASLt's matmul takes ``C`` and ``D`` as separate operands, so the
partial a peer computed is added where the tile is stored. For a ring GEMM-RS (not built:
docs/perf.md, session 27). Shapes: ``a`` ``[M, k]``, ``b`` ``[k, N]`` (each with a unit stride in
one dimension), ``c`` and ``out`` ``[M, N]`` with unit column stride and the same row
stride; fp16 / bf16 / fp32, fp32 accumulation, one rounding. Ordered on the current stream.
Off CUDA, or where cuBLASLt cannot be loaded, :func:`gemm_add` is ``torch.addmm``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools

import torch

_DATA_TYPE = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 14}  # cudaDataType_t
_COMPUTE_32F = 68  # cublasComputeType_t
_OP_N, _OP_T = 0, 1
_DESC_TRANSA, _DESC_TRANSB = 3, 4  # cublasLtMatmulDescAttributes_t
_PREF_MAX_WORKSPACE, _PREF_ALIGN_A = 1, 5  # ..._A, _B, _C, _D are 5-8
#: workspace the heuristic may ask for (split-K kernels); allocated per call from torch's
#: caching allocator, so it follows the stream like any tensor
MAX_WORKSPACE_BYTES = 32 << 20


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algo), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class CublasLtError(RuntimeError):
    pass


def _library_path() -> str | None:
    """The cuBLASLt torch itself loaded (so both use one copy), else one the loader finds."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "libcublasLt.so" in path:
                    return path
    except OSError:
        pass
    return ctypes.util.find_library("cublasLt")


@functools.cache
def _lib() -> ctypes.CDLL | None:
    torch.cuda.init()
    for name in (_library_path(), "libcublasLt.so.13", "libcublasLt.so.12"):
        if name:
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            return lib
    return None


def available() -> bool:
    """Whether :func:`gemm_add` runs on cuBLASLt here (a CUDA device and the library)."""
    return torch.cuda.is_available() and _lib() is not None


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasLtError(f"cuBLASLt: {what} returned status {status}")


@functools.cache
def _handle(device: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    with torch.cuda.device(device):
        _check(_lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


def _operand(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """``t`` (``[R, C]``, row-major view) as cuBLASLt's column-major ``t^T``: ``(op, rows,
    cols, ld)`` of the stored matrix, or ``None`` without a unit stride."""
    R, C = t.shape
    if t.stride(1) == 1 or C == 1:
        return _OP_N, C, R, max(t.stride(0), C, 1)
    if t.stride(0) == 1 or R == 1:
        return _OP_T, R, C, max(t.stride(1), R, 1)
    return None


def _alignment(t: torch.Tensor) -> int:
    ptr = t.data_ptr()
    return min(256, ptr & -ptr) if ptr else 256


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One shape's descriptors and the heuristic's algorithm (kept for the process)."""

    desc: ctypes.c_void_p
    a_layout: ctypes.c_void_p
    b_layout: ctypes.c_void_p
    c_layout: ctypes.c_void_p
    algo: _Heuristic


def _layout(lib, dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
    layout = ctypes.c_void_p()
    _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, ctypes.c_uint64(rows),
                                          ctypes.c_uint64(cols), ctypes.c_int64(ld)),
           "cublasLtMatrixLayoutCreate")
    return layout


@functools.cache
def _plan(device: int, dtype: torch.dtype, M: int, N: int, k: int, lt_a: tuple, lt_b: tuple,
          ldc: int, aligns: tuple[int, int, int, int]) -> _Plan:
    lib, dt = _lib(), _DATA_TYPE[dtype]
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_32F,
                                        _DATA_TYPE[torch.float32]), "cublasLtMatmulDescCreate")
    for attr, op in ((_DESC_TRANSA, lt_a[0]), (_DESC_TRANSB, lt_b[0])):
        value = ctypes.c_int32(op)
        _check(lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value),
                                                  ctypes.c_size_t(4)),
               "cublasLtMatmulDescSetAttribute")
    # column-major: out^T [N, M] = b^T [N, k] @ a^T [k, M] + c^T
    a_layout = _layout(lib, dt, *lt_a[1:])
    b_layout = _layout(lib, dt, *lt_b[1:])
    c_layout = _layout(lib, dt, N, M, ldc)
    pref = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    workspace = ctypes.c_uint64(MAX_WORKSPACE_BYTES)
    lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_MAX_WORKSPACE, ctypes.byref(workspace),
                                             ctypes.c_size_t(8))
    for i, align in enumerate(aligns):
        value = ctypes.c_uint32(align)
        lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_ALIGN_A + i, ctypes.byref(value),
                                                 ctypes.c_size_t(4))
    found, count = _Heuristic(), ctypes.c_int(0)
    _check(lib.cublasLtMatmulAlgoGetHeuristic(_handle(device), desc, a_layout, b_layout, c_layout,
                                              c_layout, pref, 1, ctypes.byref(found),
                                              ctypes.byref(count)),
           "cublasLtMatmulAlgoGetHeuristic")
    lib.cublasLtMatmulPreferenceDestroy(pref)
    if count.value < 1:
        raise CublasLtError(f"cuBLASLt: no algorithm for M={M} N={N} k={k} {dtype}")
    return _Plan(desc, a_layout, b_layout, c_layout, found)


_ONE = ctypes.c_float(1.0)


def gemm_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = c + a @ b`` (see the module docstring); returns ``out``."""
    M, k = a.shape
    N = b.shape[1]
    if b.shape[0] != k or c.shape != (M, N) or out.shape != (M, N):
        raise ValueError(f"gemm_add: shapes a {tuple(a.shape)}, b {tuple(b.shape)}, "
                         f"c {tuple(c.shape)}, out {tuple(out.shape)} do not fit")
    if not (a.dtype == b.dtype == c.dtype == out.dtype):
        raise ValueError(f"gemm_add: one dtype expected, got {a.dtype}, {b.dtype}, {c.dtype}, "
                         f"{out.dtype}")
    if out.device.type != "cuda" or a.dtype not in _DATA_TYPE or not available():
        return torch.addmm(c, a, b, out=out)
    lt_a, lt_b = _operand(b), _operand(a)
    if (lt_a is None or lt_b is None or (M > 1 and c.stride(0) != out.stride(0))
            or (N > 1 and (c.stride(1) != 1 or out.stride(1) != 1))):
        return torch.addmm(c, a, b, out=out)
    if M == 0 or N == 0:
        return out
    if k == 0:
        return out.copy_(c)
    launch(a, b, c.data_ptr(), out, lt_a, lt_b)
    return out


def launch(a: torch.Tensor, b: torch.Tensor, c_ptr: int, out: torch.Tensor, lt_a: tuple,
           lt_b: tuple) -> None:
    """The cuBLASLt call of :func:`gemm_add` on checked operands, ``c`` by address."""
    M, k = a.shape
    N = b.shape[1]
    device = out.device.index
    align_c = min(256, c_ptr & -c_ptr) if c_ptr else 256
    plan = _plan(device, a.dtype, M, N, k, lt_a, lt_b, max(out.stride(0), N),
                 (_alignment(b), _alignment(a), align_c, _alignment(out)))
    size = plan.algo.workspace
    workspace = torch.empty(size, dtype=torch.uint8, device=out.device) if size else None
    _check(_lib().cublasLtMatmul(
        _handle(device), plan.desc, ctypes.byref(_ONE), ctypes.c_void_p(b.data_ptr()),
        plan.a_layout, ctypes.c_void_p(a.data_ptr()), plan.b_layout, ctypes.byref(_ONE),
        ctypes.c_void_p(c_ptr), plan.c_layout, ctypes.c_void_p(out.data_ptr()),
        plan.c_layout, ctypes.byref(plan.algo.algo),
        ctypes.c_void_p(workspace.data_ptr() if size else 0), ctypes.c_size_t(size),
        ctypes.c_void_p(torch.cuda.current_stream(out.device).cuda_stream)), "cublasLtMatmul")
