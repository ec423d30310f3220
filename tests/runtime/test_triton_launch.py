"""FastKernel: which calls reuse a compiled kernel and what its launcher receives.

The compiled kernel and Triton's ``run`` are stand-ins here (no GPU): the test checks the
keying and the argument list; the GPU runs (``pytest -m gpu``, ``check_ops_at_scale``)
launch real kernels through it.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from ditron.runtime import triton_launch


def _kernel(x_ptr, n, epoch, ctx, BLOCK: tl.constexpr, MODE: tl.constexpr = 3):
    pass


class _Compiled:
    function = "fn"
    packed_metadata = "meta"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("fast", args))


@pytest.fixture
def fast(monkeypatch):
    fn = JITFunction(_kernel, do_not_specialize=["epoch"])
    log = []
    compiled = _Compiled(log)

    def slow_run(*args, grid, warmup, **kwargs):
        log.append(("triton", grid, args, kwargs))
        return compiled

    monkeypatch.setattr(fn, "run", slow_run)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1234,
                        raising=False)
    kernel = triton_launch.FastKernel(fn)
    kernel._cuda = True
    return kernel, log


def test_hits_skip_triton_and_pass_every_parameter(fast):
    kernel, log = fast
    x = torch.zeros(64)
    ctx = (torch.zeros(2, dtype=torch.int64), 0, 2)
    kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    assert log[-1][0] == "triton" and log[-1][1] == (4,)
    kernel[(4,)](torch.zeros(64), 100, 8, ctx, BLOCK=128)  # new epoch: same kernel
    kind, args = log[-1]
    assert kind == "fast"
    grid_and_stream, launch_args = args[:9], args[9:]
    assert grid_and_stream == (4, 1, 1, 1234, "fn", "meta", None, None, None)
    assert launch_args[1:] == (100, 8, ctx, 128, 3)  # constexprs by position, defaults filled
    assert len(log) == 2


@pytest.mark.parametrize("change", ["alignment", "dtype", "int", "constexpr", "bool", "ctx"])
def test_a_different_specialisation_goes_through_triton(fast, change):
    kernel, log = fast
    x = torch.zeros(64)
    ctx = (torch.zeros(2, dtype=torch.int64), 0, 2)
    kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    args, kw = [x, 100, 7, ctx], dict(BLOCK=128)
    if change == "alignment":
        args[0] = x[1:]  # 4 bytes past a 16-byte boundary
    elif change == "dtype":
        args[0] = x.to(torch.float16)
    elif change == "int":
        args[1] = 96  # n is specialised (divisibility by 16)
    elif change == "constexpr":
        kw["BLOCK"] = 256
    elif change == "bool":
        args[1] = True
        kernel[(4,)](x, 1, 7, ctx, BLOCK=128)
        assert log[-1][0] == "triton"
    else:
        args[3] = (ctx[0], 1, 2)
    kernel[(4,)](*args, **kw)
    assert log[-1][0] == "triton"


def test_plain_triton_path_when_disabled_or_unkeyable(fast, monkeypatch):
    kernel, log = fast
    x = torch.zeros(64)
    ctx = (torch.zeros(2, dtype=torch.int64), 0, 2)
    for _ in range(2):
        kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    assert log[-1][0] == "fast"
    monkeypatch.setenv("DITRON_FAST_LAUNCH", "0")
    kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    assert log[-1][0] == "triton"
    monkeypatch.delenv("DITRON_FAST_LAUNCH")
    kernel[(4,)](x, 100, 7, ctx=ctx, BLOCK=128)  # a runtime argument by keyword
    assert log[-1][0] == "triton"
    kernel[(4,)](x, 100, 7, (object(), 0, 2), BLOCK=128)  # an argument it cannot key
    assert log[-1][0] == "triton"
    kernel[lambda meta: (4,)](x, 100, 7, ctx, BLOCK=128)  # a grid function
    assert log[-1][0] == "triton"
    hooks = triton.knobs.runtime.launch_enter_hook  # e.g. a profiler's
    hook = lambda metadata: None  # noqa: E731
    hooks.add(hook)
    try:
        kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    finally:
        hooks.remove(hook)
    assert log[-1][0] == "triton"
    kernel[(4,)](x, 100, 7, ctx, BLOCK=128)
    assert log[-1][0] == "fast"


def test_bound_launch_keys_once(fast, monkeypatch):
    kernel, log = fast
    x = torch.zeros(64)
    ctx = (torch.zeros(2, dtype=torch.int64), 0, 2)
    launch = kernel.bind((4,), (x, 100, 7, ctx), {"BLOCK": 128})
    launch()
    assert [entry[0] for entry in log] == ["triton"]
    keyed = []
    monkeypatch.setattr(triton_launch, "_arg_key",
                        lambda *a: keyed.append(a) or triton_launch._tensor_key(*a))
    launch()
    launch()
    assert not keyed  # later calls launch the kept kernel without keying the arguments
    assert [entry[0] for entry in log] == ["triton", "fast", "fast"]
    # tensors go to the launcher as their addresses (checked by the first, Triton's, launch)
    assert log[-1][1][:4] == (4, 1, 1, 1234)
    assert log[-1][1][9:] == (x.data_ptr(), 100, 7, ctx, 128, 3)
    monkeypatch.setenv("DITRON_FAST_LAUNCH", "0")  # switched off: Triton's own path again
    launch()
    assert log[-1][0] == "triton"


class _Ctx(NamedTuple):
    heap_bases: torch.Tensor
    rank: int
    world_size: int


def test_subclasses_key_like_their_base(fast):
    kernel, log = fast
    ctx = _Ctx(torch.zeros(2, dtype=torch.int64), 0, 2)
    kernel[(4,)](torch.zeros(64), 100, 7, ctx, BLOCK=128)
    kernel[(4,)](torch.nn.Parameter(torch.zeros(64)), 100, 9, ctx, BLOCK=128)
    assert log[-1][0] == "fast"  # a Parameter specialises like the tensor it is
    kernel[(4,)](torch.zeros(64), 100, 7, tuple(ctx), BLOCK=128)  # a plain tuple: new key
    assert log[-1][0] == "triton"


def test_descriptor_keys_follow_tritons_specialisation():
    # two host descriptors share a FastKernel key exactly when Triton specialises them
    # alike: shape, strides and base address are runtime arguments, block shape and dtype
    # are compiled in
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.empty(1 << 16, dtype=torch.bfloat16)
    y = torch.empty(1 << 16, dtype=torch.float32)
    descs = [TensorDescriptor(x, [128, 256], [256, 1], [64, 64]),
             TensorDescriptor(x[8:], [100, 200], [208, 1], [64, 64]),
             TensorDescriptor(x, [128, 256], [256, 1], [64, 32]),
             TensorDescriptor(y, [128, 256], [256, 1], [64, 64])]
    for d in descs:
        for e in descs:
            same_key = triton_launch._arg_key(d) == triton_launch._arg_key(e)
            same_triton = (native_specialize_impl(BaseBackend, d, False, True, True)
                           == native_specialize_impl(BaseBackend, e, False, True, True))
            assert same_key == same_triton
    assert triton_launch._arg_key(descs[0]) == triton_launch._arg_key(descs[1])


class _Launcher:
    """Stand-in for Triton's CudaLauncher: ``__call__`` forwards to ``self.launch`` as
    Triton 3.6's does (after allocating scratch, here nothing)."""

    def __init__(self, launch):
        self.launch = launch

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.launch(gridX, gridY, gridZ, stream, function, False, False, None, None, *args)


@pytest.fixture
def expansions(monkeypatch) -> list:
    """The descriptors Triton's driver expands (``make_tensordesc_arg``), in order."""
    from triton.backends.nvidia import driver

    seen = []
    real = driver.make_tensordesc_arg

    def counted(arg, meta):
        seen.append(arg)
        return real(arg, meta)

    monkeypatch.setattr(driver, "make_tensordesc_arg", counted)
    return seen


def test_bound_descriptors_are_encoded_once(expansions):
    # a launcher wrapped by Triton's own descriptor handling: the bound launch passes it
    # what Triton would, with each descriptor expanded once, not at every launch
    from triton.backends.nvidia import driver
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.zeros(64, 32)
    desc = TensorDescriptor(x, [64, 32], [32, 1], [16, 16])
    signature = {"a": "*fp32", "d": "tensordesc<fp32[16, 16]>", "n": "i32", "B": "constexpr"}
    received = []
    run = _Launcher(driver.wrap_handle_tensordesc(lambda *a: received.append(a), signature,
                                                  None))
    full = [x.data_ptr(), desc, 5, 16]
    run(1, 1, 1, 0, "fn", "meta", None, None, None, *full)  # Triton's way, for reference
    assert len(expansions) == 1
    encoded = triton_launch._encoded_once(run, full)
    assert encoded is not run and run.launch is not encoded.launch
    assert len(expansions) == 2
    for _ in range(3):
        encoded(1, 1, 1, 0, "fn", "meta", None, None, None, *full)
    assert len(expansions) == 2
    assert len(received) == 4 and all(r == received[0] for r in received[1:])
    # nothing to encode: the launcher as it is
    plain = _Launcher(lambda *a: None)
    assert triton_launch._encoded_once(plain, [x.data_ptr(), 5, 16]) is plain


def test_launch_encodes_each_distinct_descriptor_once(fast, expansions, monkeypatch):
    # hits on a launcher wrapped by Triton's descriptor handling: a descriptor rebuilt at
    # every call on the same tensor is encoded once; one on another tensor, of another
    # shape or box is encoded anew, and the launcher receives what Triton would pass it
    from triton.backends.nvidia import driver
    from triton.tools.tensor_descriptor import TensorDescriptor

    kernel, log = fast
    received = []
    signature = {"x_ptr": "tensordesc<fp32[16, 16]>", "n": "i32", "epoch": "i32",
                 "ctx": "*i64"}
    launcher = _Launcher(driver.wrap_handle_tensordesc(lambda *a: received.append(a),
                                                       signature, None))
    compiled = _Compiled(log)
    compiled.run = launcher
    monkeypatch.setattr(kernel.fn, "run", lambda *a, grid, warmup, **k: compiled)
    ctx = (torch.zeros(2, dtype=torch.int64), 0, 2)
    x, y = torch.zeros(64, 32), torch.zeros(64, 32)

    def desc(t, rows=64, box=16):
        return TensorDescriptor(t, [rows, 32], [32, 1], [box, box])

    def passes(d, got):  # the launcher's last arguments: d expanded, n, epoch, ctx, BLOCK, MODE
        want = (d.base, *d.shape, *d.strides, False, *d.shape, *d.strides, 100, 7, ctx, 128, 3)
        return len(got) >= len(want) and all(
            g is w if isinstance(w, (torch.Tensor, tuple)) else g == w
            for g, w in zip(got[-len(want):], want, strict=True))

    kernel[(4,)](desc(x), 100, 7, ctx, BLOCK=128)  # the miss: Triton's own launch
    assert not received
    for call, (d, encodes) in enumerate([(desc(x), 1), (desc(x), 0), (desc(y), 1),
                                         (desc(x, rows=48), 1), (desc(x), 0)]):
        before = len(expansions)
        kernel[(4,)](d, 100, 7, ctx, BLOCK=128)
        assert len(expansions) - before == encodes, f"call {call}"
        assert passes(d, received[-1]), f"call {call}"
    box = desc(x, box=32)  # another box: another compiled kernel, through Triton again
    kernel[(4,)](box, 100, 7, ctx, BLOCK=128)
    kernel[(4,)](box, 100, 7, ctx, BLOCK=128)
    assert passes(box, received[-1])
