"""Checks shared by the GEMM kernels' tile configurations (``GemmConfig``,
``GroupedGemmConfig``): a bad knob is refused when the config is built, not deep inside a
kernel launch (Triton's ``arange`` error, or a compile failure on the GPU only)."""

from __future__ import annotations

import dataclasses
import itertools

from ..runtime.integers import as_int

#: the smallest tile side ``tl.dot`` takes
MIN_BLOCK = 16
#: the most elements a Triton tensor (a tile) may hold (``TRITON_MAX_TENSOR_NUMEL``)
MAX_TILE_ELEMENTS = 2**20
#: the warp counts Triton launches
WARPS = (1, 2, 4, 8, 16, 32)


def check_tile_config(cfg: object) -> None:
    """Raise ``ValueError`` naming the first bad field of the dataclass ``cfg``:
    ``block_*`` powers of two >= :data:`MIN_BLOCK`, no two of them spanning a tile of more
    than :data:`MAX_TILE_ELEMENTS` (Triton's limit: the ``[block_m, block_n]`` accumulator,
    the ``[block_m, block_k]`` and ``[block_k, block_n]`` operand tiles), ``num_warps`` in
    :data:`WARPS`, ``num_stages`` and ``group_m`` >= 1, ``programs`` >= 0 (0: one per SM).
    The checked fields are stored back as plain ints (a NumPy integer would key Triton's
    compile cache apart from the same ``int``)."""
    owner = type(cfg).__name__
    for field in dataclasses.fields(cfg):
        name, value = field.name, getattr(cfg, field.name)
        n = as_int(value)
        if name.startswith("block_"):
            ok, want = n is not None and n >= MIN_BLOCK and n & (n - 1) == 0, \
                f"a power of two >= {MIN_BLOCK}"
        elif name == "num_warps":
            ok, want = n in WARPS, f"one of {', '.join(map(str, WARPS))}"
        elif name in ("num_stages", "group_m"):
            ok, want = n is not None and n >= 1, "an int >= 1"
        elif name == "programs":
            ok, want = n is not None and n >= 0, "an int >= 0 (0: one per SM)"
        else:
            continue
        if not ok:
            raise ValueError(f"{owner}: {name} must be {want}, got {value!r}")
        object.__setattr__(cfg, name, n)  # works on frozen dataclasses too
    blocks = [(f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
              if f.name.startswith("block_")]
    for (name, n), (other, o) in itertools.combinations(blocks, 2):
        if n * o > MAX_TILE_ELEMENTS:
            raise ValueError(f"{owner}: {name} x {other} = {n} x {o} is a tile of {n * o} "
                             f"elements; Triton's tiles hold at most {MAX_TILE_ELEMENTS}")
