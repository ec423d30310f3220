"""Launching compiled Triton kernels without Triton's per-call argument binding.

``JITFunction.run`` binds and specialises every argument on every call, then looks the
compiled kernel up: 35 us for the fused collective and 90 us for the persistent GEMM (40
arguments, three TMA descriptors) on the GPU hosts of session 6 (``bench/host_breakdown.py``).
:class:`FastKernel` keys a launch on everything that can change which compiled kernel runs:

* tensors: dtype and whether the address is 16-byte aligned;
* integers: the exact value, except parameters listed in ``do_not_specialize``, which only
  keep whether they fit 32 bits (Triton's own rule for them);
* host TMA descriptors: dtype, rank, block shape and padding (Triton's own key; shape and
  strides are runtime arguments, encoded into the descriptor at every launch);
* tuples (``DeviceContext``) by type and element by element; constexprs and launch options
  by value;
* the current device.

The key is never coarser than Triton's own specialisation, so a hit runs the kernel Triton
would pick. A miss (the first call of a key) goes through ``JITFunction.run``, which
compiles when needed, and keeps its compiled kernel; a hit calls that kernel's launcher
directly (a few microseconds of Python), and encodes a host descriptor with the driver
only the first time it sees its value (Triton's launcher encodes each at every launch).
Anything else (the interpreter, a launch hook such
as a profiler's, an argument type not listed above, ``DITRON_FAST_LAUNCH=0``) takes the
plain Triton path.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from .config import env_flag

#: entries kept per kernel before the cache starts over (one per distinct key)
MAX_ENTRIES = 4096


class _Unkeyable(Exception):
    """An argument whose specialisation this module does not model."""


def _tensor_key(v: torch.Tensor, specialize: bool):
    return (v.dtype, v.data_ptr() % 16 == 0)


def _int_key(v: int, specialize: bool):
    if specialize:
        return v
    return -(1 << 31) <= v < (1 << 31)


def _bool_key(v: bool, specialize: bool):
    return ("bool", v)  # not equal to the key of the integer 0 or 1


def _none_key(v: None, specialize: bool):
    return None


def _float_key(v: float, specialize: bool):
    return float


def _tuple_key(v: tuple, specialize: bool):
    return (type(v), *(_arg_key(x, specialize) for x in v))


def _desc_key(v: Any, specialize: bool):
    # Triton 3.6 specialises a host descriptor on its dtype and block shape only (shape and
    # strides are runtime arguments, the base is always 16-byte aligned); rank and padding
    # are kept too
    return ("desc", v.base.dtype, len(v.shape), tuple(v.block_shape),
            getattr(v, "padding", None))


#: the key function of each argument type met so far (subclasses resolved once, below)
_KEYS_BY_TYPE: dict[type, Any] = {torch.Tensor: _tensor_key, int: _int_key, bool: _bool_key,
                                  type(None): _none_key, float: _float_key, tuple: _tuple_key}


def _key_function(v: Any):
    if isinstance(v, torch.Tensor):
        fn = _tensor_key
    elif isinstance(v, bool):
        fn = _bool_key
    elif isinstance(v, int):
        fn = _int_key
    elif isinstance(v, float):
        fn = _float_key
    elif isinstance(v, tuple):  # e.g. DeviceContext
        fn = _tuple_key
    elif isinstance(getattr(v, "base", None), torch.Tensor) and hasattr(v, "block_shape"):
        fn = _desc_key  # a host TMA descriptor
    else:
        raise _Unkeyable(type(v).__name__)
    _KEYS_BY_TYPE[type(v)] = fn
    return fn


def _arg_key(v: Any, specialize: bool = True):
    fn = _KEYS_BY_TYPE.get(type(v)) or _key_function(v)
    return fn(v, specialize)


def _no_hooks(chain) -> bool:
    """Whether a Triton launch hook (``None``, or a ``HookChain`` since 3.5) calls nothing."""
    return chain is None or not getattr(chain, "calls", True)


class FastKernel:
    """``FastKernel(jit_fn)[grid](*args, **kwargs)`` launches like ``jit_fn[grid](...)``.

    Non-constexpr parameters are passed positionally, constexprs and launch options
    (``num_warps``...) by keyword, as at every Ditron call site."""

    def __init__(self, fn) -> None:
        from triton.runtime.jit import JITFunction

        self.fn = fn
        # the interpreter's kernels (TRITON_INTERPRET=1) are not JITFunctions
        self._params = fn.params if isinstance(fn, JITFunction) else None
        params = self._params or []
        self._specialize = [not p.do_not_specialize for p in params]
        self._runtime_names = {p.name for p in params if not p.is_constexpr}
        self._entries: dict = {}
        self._cuda: bool | None = None

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def _enabled(self) -> bool:
        if self._params is None or not env_flag("DITRON_FAST_LAUNCH", True):
            return False
        if self._cuda is None:
            self._cuda = torch.cuda.is_available()
        if not self._cuda:
            return False
        from triton import knobs

        return (_no_hooks(knobs.runtime.launch_enter_hook)
                and _no_hooks(knobs.runtime.launch_exit_hook))

    def launch(self, grid: tuple, args: tuple, kwargs: dict) -> None:
        if (not self._enabled() or not isinstance(grid, tuple)
                or not self._runtime_names.isdisjoint(kwargs)):
            self.fn[grid](*args, **kwargs)
            return
        device = torch.cuda.current_device()
        try:
            key = self._key(device, args, kwargs)
            kernel = self._entries.get(key)
        except (_Unkeyable, TypeError):  # TypeError: an unhashable keyword value
            self.fn[grid](*args, **kwargs)
            return
        if kernel is None:
            kernel = self.fn[grid](*args, **kwargs)
            if hasattr(kernel, "result"):
                kernel = kernel.result()
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (kernel, _encoding_cached(kernel.run))
            return
        self._run(kernel[0], device, grid, self._full(args, kwargs), kernel[1])

    def _key(self, device: int, args: tuple, kwargs: dict) -> tuple:
        return (device, tuple(map(_arg_key, args, self._specialize)), tuple(kwargs.items()),
                tuple(map(type, kwargs.values())))

    def _full(self, args: tuple, kwargs: dict) -> list:
        full = list(args)
        for p in self._params[len(args):]:
            full.append(kwargs[p.name] if p.name in kwargs else p.default)
        return full

    @staticmethod
    def _run(kernel, device: int, grid: tuple, full: list, run=None) -> None:
        g = tuple(grid) + (1, 1)
        stream = torch._C._cuda_getCurrentRawStream(device)
        (run or kernel.run)(g[0], g[1], g[2], stream, kernel.function, kernel.packed_metadata,
                            None, None, None, *full)

    def bind(self, grid: tuple, args: tuple, kwargs: dict):
        """A launch whose arguments never change: ``bind(grid, args, kwargs)()`` launches
        like ``self[grid](*args, **kwargs)`` but keys the arguments once, on its first
        call, not at every call (for kernels of many arguments: a megakernel's are
        hundreds). Its tensor arguments are then passed as their addresses, which spares
        Triton's launcher a ``data_ptr()`` call and a driver query per tensor at every
        launch (the first launch went through Triton, which checked them). The tensors must
        stay the same objects with the same storage, and so must the tensors of its host TMA
        descriptors, which are encoded once (:func:`_encoded_once`)."""
        bound: list = []

        def launch() -> None:
            if bound and self._enabled() and torch.cuda.current_device() == bound[1]:
                self._run(*bound)
                return
            bound.clear()
            self.launch(grid, args, kwargs)
            if not self._enabled() or not self._runtime_names.isdisjoint(kwargs):
                return
            device = torch.cuda.current_device()
            try:
                entry = self._entries.get(self._key(device, args, kwargs))
            except (_Unkeyable, TypeError):
                return
            if entry is not None:
                kernel = entry[0]
                full = [v.data_ptr() if isinstance(v, torch.Tensor) else v
                        for v in self._full(args, kwargs)]
                bound.extend((kernel, device, tuple(grid), full, _encoded_once(kernel.run, full)))

        return launch


def _descriptor_handling(run):
    """``(raw, indices, metas, encode, base)`` when ``run`` (a compiled kernel's launcher)
    wraps ``raw`` in Triton 3.6's descriptor handling: ``indices`` are the positions of its
    descriptor arguments (after the ``base`` launch arguments), ``metas`` their compiled
    layouts in that order, ``encode(desc, meta)`` the driver's expansion of one. ``None``
    when it takes no descriptor, or when its launcher is not built the way this expects
    (another Triton)."""
    launch = getattr(run, "launch", None)
    names = getattr(getattr(launch, "__code__", None), "co_freevars", ())
    if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(names):
        return None
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return None
    cells = dict(zip(names, (c.cell_contents for c in launch.__closure__), strict=True))
    indices = sorted(cells["tensordesc_indices"])
    metas = cells["tensordesc_meta"] or [None] * len(indices)
    return (cells["launcher"], indices, metas, driver.make_tensordesc_arg,
            driver._BASE_ARGS_FORMAT_LEN)


def _with_launch(run, launch):
    changed = copy.copy(run)
    changed.launch = launch
    return changed


def _encoded_once(run, full: list):
    """``run`` (a compiled kernel's launcher), made to pass the host TMA descriptors among
    its arguments ``full`` as encoded once, here: Triton 3.6's launcher encodes every
    descriptor with the driver at every launch (~5 us apiece on the H200 hosts: 98 us per
    call of a 4-layer megakernel's 20, ``docs/perf.md``, session 38). ``run`` itself when
    :func:`_descriptor_handling` finds nothing to encode."""
    found = _descriptor_handling(run)
    if found is None:
        return run
    raw, indices, metas, encode, base = found
    encoded_args: list = []
    for i, v in enumerate(full):
        if i in indices:
            encoded_args.extend(encode(v, metas[indices.index(i)]))
        else:
            encoded_args.append(v)

    def launch_encoded(*given):
        raw(*given[:base], *encoded_args)

    return _with_launch(run, launch_encoded)


#: encodings a launcher keeps (per kernel) before it starts over
MAX_ENCODINGS = 256


def _encoding_cached(run):
    """``run``, made to encode each host TMA descriptor once per distinct value: an encoding
    (a ``CUtensorMap`` and the shape and strides after it) depends on the base address, shape,
    strides, box and padding, and on the compiled layout of its argument position, which
    the key holds; so a descriptor rebuilt at every call on the same tensor (a weight, a
    workspace) is encoded once. ``run`` itself when :func:`_descriptor_handling` finds
    nothing to encode."""
    found = _descriptor_handling(run)
    if found is None:
        return run
    raw, indices, metas, encode, base = found
    at = [(base + i, i, meta) for i, meta in reversed(list(zip(indices, metas, strict=True)))]
    encodings: dict = {}

    def launch_cached(*given):
        args = list(given)
        for p, i, meta in at:  # from the last, so earlier positions stay put
            d = args[p]
            key = (i, d.base.data_ptr(), tuple(d.shape), tuple(d.strides),
                   tuple(d.block_shape), d.padding)
            enc = encodings.get(key)
            if enc is None:
                if len(encodings) >= MAX_ENCODINGS:
                    encodings.clear()
                enc = encodings[key] = encode(d, meta)
            args[p:p + 1] = enc
        raw(*args)

    return _with_launch(run, launch_cached)


__all__ = ["FastKernel", "MAX_ENCODINGS", "MAX_ENTRIES"]
