"""Device primitives for plain ``@triton.jit`` kernels.

Every primitive but ``fence_async_proxy`` and ``timestamp`` takes the device context
``ctx`` (``ditron.context()`` on the host) after its data arguments, followed only by
compile-time options (``BLOCK`` of ``put`` / ``get``) and optional ones (``mask``, ``sem``,
``scope``, ``op``); those that reach another rank's memory name that peer's rank (``wait``
and ``wait_all`` spin on the own signals) and reach it through the single rule
:func:`translate`. See ``core`` and ``signal`` for memory-ordering semantics.
"""

from .context import DIAG_WORDS, DeviceContext
from .core import (
    atomic_add,
    atomic_cas,
    atomic_max,
    atomic_xchg,
    get,
    load,
    put,
    store,
    translate,
    translate_each,
)
from .signal import fence, fence_async_proxy, notify, rank, wait, wait_all, world_size
from .timer import timestamp

__all__ = [
    "DIAG_WORDS",
    "DeviceContext",
    "atomic_add",
    "atomic_cas",
    "atomic_max",
    "atomic_xchg",
    "fence",
    "fence_async_proxy",
    "get",
    "load",
    "notify",
    "put",
    "rank",
    "store",
    "timestamp",
    "translate",
    "translate_each",
    "wait",
    "wait_all",
    "world_size",
]
