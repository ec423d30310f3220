"""Whether a kernel's masked pointer loads of an operand can be vectorized.

Triton specializes a kernel's integer arguments by divisibility by 16 and its pointers by
16-byte alignment. A tile load along an operand's contiguous dimension compiles to vector
loads only when that proves every row starts aligned and the bounds mask is uniform over
a vector: the base aligned, the other strides and the contiguous extent multiples of 16
elements. Otherwise each element is loaded on its own, with its own address and mask
bit, and the GPU's largest tiles spill registers (ptxas, sm_90a, bf16 at 128 x 256 x 64:
0.9-3 KB per thread for the persistent GEMM, 2.5 KB for the grouped GEMM, session 55).
The kernels' ``default_config`` then name smaller tiles; TMA loads (``descriptors.py``)
have no such limit.
"""

from __future__ import annotations

import torch

#: Triton's divisibility specialization, in elements (sizes, strides) and bytes (pointers)
DIVISOR = 16


def vector_loads(t: torch.Tensor) -> bool:
    """Whether pointer loads of ``t``'s tiles along its unit-stride dimension vectorize: one
    dimension has stride 1 and an extent that is a multiple of :data:`DIVISOR`, every other
    dimension of more than one element has a stride that is, and the base is 16-byte
    aligned. ``False`` when no dimension has stride 1."""
    strides, shape = t.stride(), t.shape
    if 1 not in strides or t.data_ptr() % DIVISOR:
        return False
    inner = len(strides) - 1 - strides[::-1].index(1)  # the last unit-stride dimension
    if shape[inner] % DIVISOR:
        return False
    for d, stride in enumerate(strides):
        if d != inner and stride % DIVISOR and shape[d] > 1:
            return False
    return True
