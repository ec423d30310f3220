"""Property fuzz of ``all_gather`` / ``reduce_scatter`` / ``all_reduce`` / ``all_to_all``
against torch references.

Each launch runs a seeded sequence of random calls, the same on every rank (the seed picks
the op, dtype, shape, layout and options). Every rank makes every rank's input from its
own generator, so the reference is plain torch on the same data (``torch.cat``, sums in
float64, ``amax``/``amin``); the data differs per rank and per call. Sizes are 0, 1,
primes or not multiples of any block; tensors 1-d to 3-d, contiguous, transposed, sliced
with steps, at an odd offset or expanded; fp32 / bf16 / fp16 / fp64 / integer / bool /
int16 / fp8 / complex64 (moved as carriers) dtypes; every engine of the CPU backend
(and ``"auto"``), every ``all_reduce`` method, every reduction, the copy engine's
all-gather by pushes or pulls, tiny chunks (``DITRON_PULL_CHUNK_BYTES``); ``out=`` right
(contiguous or not), in torch.distributed's in-place forms, or wrong: of the wrong shape
/ dtype / device, expanded (with elements: an empty one, as torch, is taken), or
overlapping the input otherwise (those must raise ``ValueError`` on every rank, before
anything moves, and later calls must still work); some calls inside
``ditron.ops.graph_safe()``. Sizes and engines change from call to call
(signal and workspace reuse); outputs are poisoned, inputs must come back unchanged and
the results of earlier calls must stay as they were.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random

import pytest
import torch

import ditron

from .poison import poison_empty

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INTS = (torch.int64, torch.int32, torch.int8, torch.uint8)
MOVED_ONLY = (torch.int16, torch.bool, torch.float8_e4m3fn, torch.complex64)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float64: 1e-12}
SIZES = (0, 1, 2, 3, 5, 7, 13)
ENGINES = (None, "copy_engine", "sm", "network", "tma")


def _values(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g).to(dtype)
    lo, hi = (0, 256) if dtype == torch.uint8 else (-120, 120)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _layout(shape: tuple[int, ...], dtype: torch.dtype, kind: str,
            g: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` in layout ``kind``, values from ``g``."""
    nd = len(shape)
    if kind == "transposed" and nd > 1:
        return _values(tuple(reversed(shape)), dtype, g).permute(*reversed(range(nd)))
    if kind == "stepped":
        return _values((*shape[:-1], 2 * shape[-1] + 1), dtype, g)[..., 1::2]
    if kind == "offset":  # starts one element in: odd byte offsets for 1-byte types
        return _values((shape[0] * _prod(shape[1:]) + 1,), dtype, g)[1:].view(shape)
    if kind == "expanded" and nd > 1:
        return _values((*shape[:-1], 1), dtype, g).expand(shape)
    return _values(shape, dtype, g)


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _reduce_ref(parts: list[torch.Tensor], op: str) -> torch.Tensor:
    dtype = parts[0].dtype
    if op in ("max", "min"):
        stacked = torch.stack([p.contiguous() for p in parts])
        if dtype == torch.bool:
            return stacked.any(0) if op == "max" else stacked.all(0)
        return stacked.amax(0) if op == "max" else stacked.amin(0)
    if dtype.is_floating_point:
        total = torch.stack([p.double() for p in parts]).sum(0)
        if op == "avg":
            total = total / len(parts)
        return total  # float64: compared with a tolerance
    # integer sums wrap in their own type
    return torch.stack([p.to(torch.int64) for p in parts]).sum(0).to(dtype)


def _check(got: torch.Tensor, ref: torch.Tensor, parts: list[torch.Tensor] | None,
           dtype: torch.dtype, what: str) -> None:
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype} != {dtype}"
    if ref.dtype == torch.float64 and dtype != torch.float64 or (
            dtype == torch.float64 and parts is not None):
        g64 = got.double()
        assert torch.isfinite(g64).all(), f"{what}: unwritten (NaN) elements"
        scale = torch.stack([p.double().abs() for p in parts]).sum(0) if parts else 1.0
        err = (g64 - ref).abs()
        bound = TOL[dtype] * (scale + 1e-3)
        assert (err <= bound).all(), f"{what}: error {err.max().item()}"
        return
    if dtype.itemsize == 1 and dtype != torch.bool:  # fp8: compared bit for bit
        got, ref = got.view(torch.uint8), ref.view(torch.uint8)
    assert torch.equal(got, ref.to(got.dtype)), f"{what}: differs from the reference"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (fp8 has no ``torch.equal``)."""
    if a.dtype.is_floating_point and a.element_size() == 1:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(a.cpu(), b.cpu())


def _expect_refusal(call, what: str) -> None:
    try:
        call()
    except ValueError:
        return
    raise AssertionError(f"{what}: accepted")


def _fuzz_case(seed: int, calls: int, graphs: bool, sizes: tuple[int, ...] = SIZES) -> list[str]:
    """``calls`` random calls (dimensions from ``sizes``); returns their descriptions (the
    same on every rank)."""
    poison_empty()
    from ditron.ops import chunked_exchanges

    w = ditron.world()
    W, me, dev = w.world_size, w.rank, w.device
    rng = random.Random(seed)  # the same choices on every rank
    seen: list[str] = []
    earlier: list[tuple[torch.Tensor, torch.Tensor]] = []
    for i in range(calls):
        op = rng.choice(["all_gather", "reduce_scatter", "all_reduce", "all_to_all"])
        reducing = op in ("reduce_scatter", "all_reduce")
        red = rng.choice(["sum", "sum", "avg", "max", "min"]) if reducing else None
        pool = FLOATS + INTS + (() if reducing else MOVED_ONLY)
        if red in ("max", "min"):
            pool += (torch.bool,)
        if red == "avg":
            pool = FLOATS
        dtype = rng.choice(pool)
        engine = rng.choice(ENGINES)
        graph = graphs and rng.random() < 0.25 and engine in (None, "copy_engine", "sm")
        nd = rng.choice([1, 1, 2, 3])
        shape = [rng.choice(sizes) for _ in range(nd)]
        dim = rng.randrange(-nd, nd)
        if op == "reduce_scatter":
            shape[dim] = W * rng.choice(sizes)
        layout = rng.choice(["contiguous", "contiguous", "transposed", "stepped", "offset",
                             "expanded"])
        chunked_exchanges.GATHER_BY = rng.choice([None, "push", "pull"])
        os.environ["DITRON_PULL_CHUNK_BYTES"] = str(rng.choice([0, 8, 24]))
        kw: dict = {} if engine is None else {"engine": engine}
        if red is not None:
            kw["op"] = red
        if op == "all_reduce":
            kw["method"] = rng.choice(["auto", "one_shot", "two_shot"])
        out_kind = (rng.choice(["none", "none", "right", "strided", "shape", "dtype", "device",
                                "expanded", "alias", "overlap"])
                    if op in ("all_gather", "reduce_scatter") else "none")
        if op == "all_to_all":  # a shared split matrix: row r is what rank r sends
            matrix = [[rng.choice([0, 0, 1, 2, 3]) for _ in range(W)] for _ in range(W)]
            splits_kind = rng.choice(["none", "in", "both"])
            if splits_kind == "none":
                even = rng.choice([0, 1, 2])
                matrix = [[even] * W for _ in range(W)]
            shapes = [(sum(matrix[r]), *shape[1:]) for r in range(W)]
        else:
            shapes = [tuple(shape)] * W
        what = (f"#{i} {op} {dtype} shapes={shapes} dim={dim} layout={layout} {kw} "
                f"out={out_kind} graph_safe={graph} by={chunked_exchanges.GATHER_BY} "
                f"chunk={os.environ['DITRON_PULL_CHUNK_BYTES']}")
        seen.append(what)
        xs = [_layout(tuple(shapes[r]), dtype, layout,
                      torch.Generator().manual_seed(10007 * seed + 101 * i + r))
              for r in range(W)]
        x = xs[me].to(dev)
        x0 = x.clone()
        d = dim % nd
        # references
        parts_for_tol = None
        if op == "all_gather":
            ref = torch.cat(xs, d)
        elif op == "all_to_all":
            ref = torch.cat([xs[r][sum(matrix[r][:me]):sum(matrix[r][:me + 1])]
                             for r in range(W)])
        else:
            ref = _reduce_ref(xs, red)
            parts_for_tol = xs
            if op == "reduce_scatter":
                ref = ref.chunk(W, d)[me]
                parts_for_tol = [p.chunk(W, d)[me] for p in xs]
        out = None
        bad = out_kind in ("shape", "dtype", "device", "expanded", "overlap")
        if out_kind != "none":
            oshape = list(ref.shape)
            if out_kind == "shape":
                oshape[-1] += 1
            odtype = (torch.float32 if dtype != torch.float32 else torch.float64) \
                if out_kind == "dtype" else dtype
            if out_kind == "device":
                out = torch.empty(oshape, dtype=odtype, device="meta")
            elif out_kind == "strided" and len(oshape) > 1:
                out = torch.empty(tuple(reversed(oshape)), dtype=odtype,
                                  device=dev).permute(*reversed(range(len(oshape))))
            elif out_kind == "expanded":
                oshape[0] = max(oshape[0], 2)
                out = torch.empty((1, *oshape[1:]), dtype=odtype, device=dev).expand(oshape)
                # elements sharing memory are refused; an empty out has none (torch takes it)
                bad = oshape != list(ref.shape) or out.numel() > 0
            elif out_kind == "overlap":  # another rank's rows: refused
                if W == 1 or dim % nd != 0 or x.numel() == 0 or not x.is_contiguous():
                    out_kind, bad = "right", False
                    out = torch.empty(oshape, dtype=odtype, device=dev)
                elif op == "all_gather":
                    n, other = x.shape[0], (me + 1) % W
                    out = torch.empty(oshape, dtype=dtype, device=dev)
                    out[other * n:(other + 1) * n].copy_(x)
                    x = out[other * n:(other + 1) * n]
                else:
                    n = ref.shape[0]
                    out = x[((me + 1) % W) * n:((me + 1) % W + 1) * n]
            elif out_kind == "alias":  # torch.distributed's in-place forms
                if dim % nd != 0 or not x.is_contiguous():
                    out_kind = "right"
                    out = torch.empty(oshape, dtype=odtype, device=dev)
                elif op == "all_gather":  # x is this rank's rows of out
                    n = x.shape[0]
                    out = torch.empty(oshape, dtype=dtype, device=dev)
                    out[me * n:(me + 1) * n].copy_(x)
                    x = out[me * n:(me + 1) * n]
                else:  # out is this rank's rows of x
                    n = ref.shape[0]
                    out = x[me * n:(me + 1) * n]
                    x0 = None  # x is written
            else:
                out = torch.empty(oshape, dtype=odtype, device=dev)
            kw["out"] = out
        fn = getattr(ditron.ops, op)
        args = (x, dim) if op in ("all_gather", "reduce_scatter") else (x,)
        if op == "all_to_all" and splits_kind != "none":
            args = (x, matrix[me], [matrix[r][me] for r in range(W)]
                    if splits_kind == "both" else None)
        elif op == "all_reduce":
            args = (x,)
        ctx = ditron.ops.graph_safe() if graph else contextlib.nullcontext()
        if bad:
            with ctx:
                _expect_refusal(functools.partial(fn, *args, **kw), what)
            assert x0 is None or _same(x, x0), f"{what}: an input changed"
            continue
        with ctx:
            got = fn(*args, **kw)
        if out is not None:
            assert got is out, f"{what}: did not return out"
        _check(got.cpu(), ref, parts_for_tol, dtype, what)
        if out_kind != "alias":
            assert _same(x, x0), f"{what}: an input changed"
        for j, (old, copy) in enumerate(earlier):
            assert _same(old, copy), f"{what}: an earlier result ({j}) changed"
        if out_kind != "alias":  # (an in-place result is the next call's input's storage)
            earlier = (earlier + [(got, got.clone())])[-6:]
    return seen


@pytest.mark.parametrize("world_size, seed", [(1, 1), (2, 2), (3, 3), (4, 4)])
def test_collectives_fuzz(world_size, seed, backend, monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")
    res = ditron.launch(_fuzz_case, world_size, seed, 30, True, backend=backend)
    assert all(r == res[0] for r in res) and len(res[0]) == 30


def test_collectives_fuzz_small_heap(backend, monkeypatch):
    # a heap that holds a few inboxes / fused workspaces only (sizes small enough for each
    # to fit alone): they are evicted and made again (twice per rank with this seed)
    monkeypatch.setenv("DITRON_POISON", "1")
    monkeypatch.setenv("DITRON_HEAP_SIZE", "32K")
    res = ditron.launch(_fuzz_case, 3, 505, 40, True, (0, 1, 2, 3, 5), backend=backend)
    assert all(r == res[0] for r in res)


@pytest.mark.parametrize("world_size", [3, 4])
def test_collectives_fuzz_two_simulated_nodes(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    res = ditron.launch(_fuzz_case, world_size, 20 + world_size, 24, False, backend=backend)
    assert all(r == res[0] for r in res)
