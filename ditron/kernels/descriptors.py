"""Host TMA descriptors for the 2-D operands of the kernels' tile loads.

A descriptor (``triton.tools.tensor_descriptor.TensorDescriptor``) describes a row-major
``[rows, cols]`` tensor and the box one ``desc.load([r, c])`` reads; elements outside the
tensor load as zeros, so loads need no masks. On sm_90 the load is one TMA instruction
(``cp.async.bulk.tensor``) that the software pipeline overlaps with the dots; the CPU
backend's interpreter emulates it. Both the persistent GEMM (``gemm.py``) and the task
tiles (``tiles.py``) take their operands through :func:`describe`.
"""

from __future__ import annotations

import torch

from ..runtime.config import env_switch

#: element types a descriptor may describe
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: the largest box extent TMA accepts, per dimension
MAX_BOX = 256

_CAPABILITY: dict[int, tuple[int, int]] = {}


def tma_wanted(device: torch.device, use_tma: bool | None = None) -> bool:
    """Whether the TMA load path is requested on ``device`` (operand rules aside).

    ``use_tma`` turns it on or off; otherwise ``DITRON_GEMM_TMA=0|1`` does (``1`` also turns
    it on for the CPU backend's interpreter); otherwise it is on for CUDA capability >= 9.
    On a CUDA device of capability < 9 (no TMA) it is off whatever is asked."""
    if use_tma is None:
        use_tma = env_switch("DITRON_GEMM_TMA")
    if use_tma is not None:
        return use_tma and (device.type != "cuda" or capability(device)[0] >= 9)
    return device.type == "cuda" and capability(device)[0] >= 9


def transposable(dtype: torch.dtype) -> bool:
    """Whether a kernel should load a ``[c, r]`` box of this dtype and transpose it for
    ``tl.dot``: 16-bit operands only. 32-bit ones multiply in IEEE fp32 (FMA, no tensor
    cores), and that dot on a transposed TMA tile spills (ptxas, sm_90a: 4.7-22 KB per
    thread at the GEMMs' and the megakernel's GPU tiles); on row-major boxes or through
    pointer loads, the same tiles do not."""
    return dtype.itemsize == 2


def capability(device: torch.device) -> tuple[int, int]:
    """CUDA compute capability of ``device`` (cached)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return cap


def fits(t: torch.Tensor, box_inner: int) -> bool:
    """TMA rules for a 2-D row-major view ``t``: a descriptor dtype, last dim contiguous,
    16-byte aligned base and row stride, rows that do not overlap (row stride >= row
    length: the layout the CUDA driver documents for a tensor map, so not a broadcast
    ``expand`` with row stride 0, which the pointer path reads instead), non-empty; on
    CUDA the box's inner extent must span >= 16 bytes."""
    es = t.element_size()
    return (t.dtype in DTYPES and t.dim() == 2 and t.shape[0] > 0 and t.shape[1] > 0
            and t.stride(1) == 1 and t.stride(0) >= t.shape[1]
            and (t.stride(0) * es) % 16 == 0 and t.data_ptr() % 16 == 0
            and (t.device.type != "cuda" or box_inner * es >= 16))


def describe(t: torch.Tensor, box: tuple[int, int]):
    """A descriptor of ``t`` (``[R, C]``) whose loads read ``box`` (``[br, bc]``) blocks, and
    whether it describes ``t`` transposed: ``(desc, False)`` on ``t`` itself when row-major,
    ``(desc, True)`` on the row-major ``[C, R]`` of ``t.t()`` with a ``[bc, br]`` box (a
    weight ``nn.Linear`` stores as ``[out, in]`` and a GEMM reads as ``[in, out]``; the
    kernel loads ``[c, r]`` and transposes the block); ``None`` when neither meets the TMA
    rules (:func:`fits`) or a box extent passes :data:`MAX_BOX`."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    br, bc = box
    if max(br, bc) > MAX_BOX or t.dim() != 2:
        return None
    if fits(t, bc):
        return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], [br, bc]), False
    w = t.t()
    if fits(w, br):
        return TensorDescriptor(w, list(w.shape), [w.stride(0), 1], [bc, br]), True
    return None
