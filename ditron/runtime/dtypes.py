"""Which dtypes the collectives take, the type each travels as, and the type sums run in.

* **Moved** (all-gather, all-to-all, send/recv): any dtype of 1, 2, 4 or 8 bytes. The
  kernels and engines see only :data:`NATIVE` types; any other dtype travels as a
  :data:`CARRIERS` type (a ``Tensor.view``, bit for bit) and the result is viewed back.
  ``bool``, the fp8 types, ``int16``, the unsigned types and ``complex64`` go this way.
  :func:`moved_as` widens every moved dtype but the three float types (which keep their
  own, tuned path) to the widest carrier the shape allows: the fused kernels move 1-byte
  elements in 1.45-2.9x bf16's time per byte, 8-byte ones in 0.67-1.02x (one H200,
  ``docs/perf.md``, session 40).
* **Reduced** (reduce-scatter, all-reduce) with one of :data:`OPS`: sums take the
  :data:`SUMMED` types, those NCCL sums; 16-bit floats and fp32 accumulate in fp32 and
  round once at the end, the others accumulate in their own type, as torch.distributed
  does (integers wrap on overflow). Averages take the floating ones, as NCCL's do; max and
  min the same types as sums, and ``bool`` (moved as uint8: any / all).
"""

from __future__ import annotations

import torch
import triton.language as tl

#: dtypes the collective kernels and engines handle as themselves, with their Triton types
NATIVE: dict[torch.dtype, tl.dtype] = {
    torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16,
    torch.float64: tl.float64, torch.int64: tl.int64, torch.int32: tl.int32,
    torch.int8: tl.int8, torch.uint8: tl.uint8,
}
#: the dtypes reduce-scatter and all-reduce sum
SUMMED = tuple(NATIVE)
#: what a moved dtype outside ``NATIVE`` travels as, by its width in bytes (each is
#: moved bit for bit by every engine; NCCL sends each of them)
CARRIERS = {1: torch.uint8, 2: torch.float16, 4: torch.int32, 8: torch.int64}
_LOW_PRECISION = (torch.float32, torch.bfloat16, torch.float16)
#: the reductions of reduce-scatter and all-reduce (``torch.distributed.ReduceOp``'s names)
OPS = ("sum", "avg", "max", "min")


def check_moved(what: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` (naming ``what``) unless elements of ``dtype`` can be moved."""
    if dtype not in NATIVE and dtype.itemsize not in CARRIERS:
        raise ValueError(f"{what}: dtype {dtype} ({dtype.itemsize} bytes) is not "
                         f"supported; elements of 1, 2, 4 or 8 bytes are")


def check_summed(what: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` (naming ``what``) unless elements of ``dtype`` can be summed."""
    if dtype not in SUMMED:
        raise ValueError(f"{what}: cannot sum dtype {dtype}; sums take "
                         f"{', '.join(str(d) for d in SUMMED)}")


def reduction(what: str, op: object) -> str:
    """``op`` (a name of :data:`OPS`, a ``torch.distributed.ReduceOp`` member such as
    ``ReduceOp.MAX``, or a ``ReduceOp`` made of one, ``ReduceOp(ReduceOp.MAX)``) as a name
    of :data:`OPS`; ``ValueError`` (naming ``what``) for any other."""
    member = getattr(op, "op", op)  # a ReduceOp object holds its member as ``op``
    name = op.lower() if isinstance(op, str) else str(getattr(member, "name", "")).lower()
    if name not in OPS:
        raise ValueError(f"{what}: unsupported reduction {op!r}; use one of "
                         f"{', '.join(OPS)} (or the ReduceOp of that name)")
    return name


def check_reduced(what: str, op: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` (naming ``what``) unless ``op`` (a name of :data:`OPS`) can
    reduce elements of ``dtype``."""
    if op in ("max", "min"):
        if dtype != torch.bool and dtype not in SUMMED:
            raise ValueError(f"{what}: cannot take the {op} of dtype {dtype}; {op} takes "
                             f"torch.bool and {', '.join(str(d) for d in SUMMED)}")
        return
    check_summed(what, dtype)
    if op == "avg" and not dtype.is_floating_point:
        raise ValueError(f"{what}: cannot average dtype {dtype}; averages take floating "
                         f"types (sum, then divide)")


def carrier(dtype: torch.dtype) -> torch.dtype:
    """The dtype elements of ``dtype`` travel as: itself if native, else its width's
    carrier."""
    return dtype if dtype in NATIVE else CARRIERS[dtype.itemsize]


def carried(x: torch.Tensor) -> torch.Tensor:
    """``x`` viewed as its carrier (``x`` itself when its dtype is native)."""
    return x if x.dtype in NATIVE else x.view(CARRIERS[x.element_size()])


def moved_as(dtype: torch.dtype, shape: tuple[int, ...], widen: bool = True) -> torch.dtype:
    """The type a moved tensor of ``dtype`` and ``shape`` travels as: fp32, bf16 and fp16
    as themselves; any other dtype, with ``widen`` and at least one dimension, as the
    widest carrier whose width divides the bytes of the last dimension (a function of
    the call's dtype and shape, so every rank of a call picks the same); else as
    :func:`carrier`. Callers must not widen a last dimension that is cut by split sizes."""
    if dtype in _LOW_PRECISION or not widen or not shape:
        return carrier(dtype)
    row_bytes = shape[-1] * dtype.itemsize
    for width in (8, 4, 2):
        if width > dtype.itemsize and row_bytes % width == 0:
            return CARRIERS[width]
    return carrier(dtype)


def viewed(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as ``dtype`` (a width :func:`moved_as` allows for its shape); a contiguous copy
    first when ``x``'s strides or storage offset do not allow the view (a slice of 1-byte
    elements starting at an odd byte is contiguous, yet cannot be viewed as int32). An empty
    ``x`` gives an empty tensor of the viewed shape (torch refuses views of some)."""
    if x.dtype == dtype:
        return x
    if x.numel() == 0 and x.dim() > 0:
        last = x.shape[-1] * x.dtype.itemsize // dtype.itemsize
        return torch.empty((*x.shape[:-1], last), dtype=dtype, device=x.device)
    try:
        return x.view(dtype)
    except RuntimeError:
        return x.clone(memory_format=torch.contiguous_format).view(dtype)


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """The dtype a sum of ``dtype`` elements accumulates in."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def tl_accumulator(dtype: torch.dtype) -> tl.dtype:
    """:func:`accumulator` as a Triton type, for kernels that sum ``dtype``."""
    return NATIVE[accumulator(dtype)]
