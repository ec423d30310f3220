"""Ditron: compute-communication-overlapped multi-GPU kernels in stock Triton.

Host API (see DESIGN.md): ``launch``, ``init``, ``world``, ``use``, ``shutdown``,
``empty``, ``zeros``, ``free``, ``peer``, ``barrier``, ``context``; device primitives live in
``ditron.language``; operators in ``ditron.ops``; torch modules in ``ditron.nn``; task
graphs run as megakernels in ``ditron.task``; overlap traces in ``ditron.trace``.
"""

from __future__ import annotations

from .runtime import config as _config
from .runtime import interpret as _interpret

# Must precede every module that defines @triton.jit kernels (see runtime/interpret.py).
try:
    _interpret.arrange(_config.default_backend())
except _config.SettingsError:
    pass  # a bad DITRON_BACKEND: raised where a backend is first needed (init, launch, CLI)

from . import language  # noqa: E402
from .runtime import agreement as _agreement  # noqa: E402, F401 - ditron.runtime.agreement.agree for op writers
from .runtime.barrier import barrier  # noqa: E402
from .runtime.diagnostics import WaitTimeoutError, check_waits, set_wait_timeout  # noqa: E402
from .runtime.launch import RankError, launch  # noqa: E402
from .runtime.signals import SignalPad, signal_pad  # noqa: E402
from .runtime.symmetric import context, empty, free, is_symmetric, peer, zeros  # noqa: E402
from .runtime.world import World, init, is_initialized, shutdown, use, world  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "RankError",
    "SignalPad",
    "WaitTimeoutError",
    "World",
    "barrier",
    "check_waits",
    "context",
    "empty",
    "free",
    "init",
    "is_initialized",
    "is_symmetric",
    "language",
    "launch",
    "peer",
    "set_wait_timeout",
    "shutdown",
    "signal_pad",
    "use",
    "world",
    "zeros",
]


_LAZY = ("ops", "nn", "task", "trace")


def __getattr__(name: str):
    # ``ditron.ops``, ``ditron.nn`` and ``ditron.task`` import kernels, ``ditron.trace``
    # (``ditron.trace.enable()``, docs/tp_gemm.md) the ops' trace events: loaded on first use.
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ditron' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazily loaded subpackages before their first use too (``dir``, tab completion)."""
    return sorted(set(globals()) | set(_LAZY))
