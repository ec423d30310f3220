"""Checks shared by the GEMM kernels' tile configurations (``GemmConfig``,
``GroupedGemmConfig``): a bad knob is refused when the config is built, not deep inside a
kernel launch (Triton's ``arange`` error, or a compile failure on the GPU only)."""

from __future__ import annotations

import dataclasses

from ..runtime.integers import as_int

#: the smallest tile side ``tl.dot`` takes
MIN_BLOCK = 16
#: the warp counts Triton launches
WARPS = (1, 2, 4, 8, 16, 32)


def check_tile_config(cfg: object) -> None:
    """Raise ``ValueError`` naming the first bad field of the dataclass ``cfg``:
    ``block_*`` powers of two >= :data:`MIN_BLOCK`, ``num_warps`` in :data:`WARPS`,
    ``num_stages`` and ``group_m`` >= 1, ``programs`` >= 0 (0: one per SM). The checked
    fields are stored back as plain ints (a NumPy integer would key Triton's compile cache
    apart from the same ``int``)."""
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
