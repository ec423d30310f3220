"""Public operators: local kernel + chunk plan + tuned choice + plain fallback.

Collectives (``collectives.py``): ``all_gather``, ``reduce_scatter``, ``all_reduce``,
``all_to_all``, ``all_to_all_device``, ``all_to_all_inbox`` (the received rows read in
place), ``all_to_all_device_pair`` (companion rows along the same routes) and
``exchange_counts`` (device-side splits, ``a2a_device.py``); point-to-point
(``p2p.py``): ``send``, ``recv``. Overlapped GEMMs (``tp_gemm.py``): ``ag_gemm``,
``gemm_rs``, ``gemm_ar``. Expert parallelism (``moe.py``): ``moe_dispatch``,
``grouped_gemm``, ``moe_combine``. ``graph_safe`` (``runtime/cuda_graphs.py``): the
warm-up of the graph-safe variants before a CUDA-graph capture. ``release_workspaces``
(``workspaces.py``): free the ops' cached symmetric buffers and signal pads (collective).
Every op equals its torch / torch.distributed reference, computes in its inputs' dtype
and, like torch.distributed's, records no autograd history: each runs with gradients and
autocast off and is a graph break under ``torch.compile`` (``modes.public_op``);
``ditron.nn.functional`` has the differentiable forms, which follow autocast and compile.
"""

from __future__ import annotations

import importlib

_HOME = {
    "all_gather": "collectives",
    "reduce_scatter": "collectives",
    "all_reduce": "collectives",
    "all_to_all": "collectives",
    "all_to_all_device": "a2a_device",
    "all_to_all_inbox": "a2a_device",
    "all_to_all_device_pair": "a2a_device",
    "exchange_counts": "a2a_device",
    "send": "p2p",
    "recv": "p2p",
    "ag_gemm": "tp_gemm",
    "gemm_rs": "tp_gemm",
    "gemm_ar": "tp_gemm",
    "graph_safe": "graphs",
    "moe_dispatch": "moe",
    "moe_combine": "moe",
    "grouped_gemm": "moe",
    "release_workspaces": "workspaces",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        module = importlib.import_module(f".{_HOME[name]}", __name__)
        value = globals()[name] = getattr(module, name)  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'ditron.ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The ops before their first use too (``dir``, ``help``, tab completion)."""
    return sorted(set(globals()) | set(_HOME))
