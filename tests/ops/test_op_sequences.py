"""Ops called in random interleaved sequences, the way a model calls them, against torch.

The ops share one process per rank: the heap, the cached workspaces (``ops/workspaces.py``),
the signal pads and their epochs (``runtime/signals.py``), the exchanges' inboxes and the
host-side caches of agreed shapes. A call that leaves stale state for another op (or for
itself at another shape, engine, dtype or method) fails here even when each op alone
passes.

A sequence is a list of *steps* drawn on the host from one seed (:func:`draw_steps`), the
same list on every rank: each step names an op (``all_gather``, ``reduce_scatter``,
``all_reduce`` with every method and reduction, ``all_to_all`` with uneven splits and
zeros, ``all_to_all_device``, ``ag_gemm`` with and without ``return_gathered``,
``gemm_rs``, ``gemm_ar`` with every method, engine and chunking, the ``ditron.nn``
parallel linear layers' forward and backward, ``release_workspaces``, and symmetric
allocations that move the heap's free blocks), shapes (repeated, so cached workspaces and
pads are reused, and growing, so pads and inboxes are replaced; some do not divide into
tiles, some are empty), a dtype, a dim, an engine (every one the op takes on the CPU
backend), an ``out`` (none, plain, strided, symmetric from ``ditron.empty``), sometimes
``ditron.ops.graph_safe()`` around the call (the CUDA-graph-safe variants, eagerly) and a
data seed. Every rank builds every rank's inputs from the data seed, so the reference
(torch on the CPU, in fp32) needs no communication. Outputs are poisoned (``torch.empty``
NaN-filled, a given ``out`` NaN-filled); inputs must come back unchanged. A call that
finds the heap full (``HeapExhausted`` on every rank) ends its sequence without a failure.

CI runs bounded sequences (``CI_RUNS``: world sizes 1-4, two small heaps on which the
workspaces evict each other, two simulated nodes). Environment, for a developer hunting
bugs with longer runs:

* ``DITRON_FUZZ_STEPS``: steps per sequence (default: each run's CI length);
* ``DITRON_FUZZ_SEEDS``: how many seeds each run takes (default 1), from
  ``DITRON_FUZZ_SEED`` (default: the run's CI seed).

For example ``DITRON_FUZZ_STEPS=300 DITRON_FUZZ_SEEDS=20 python -m pytest -q
tests/ops/test_op_sequences.py -k fuzz`` (about 10-30 s per sequence of 300 steps on two
cores). A failure names the seed and the step; ``python -m tests.ops.test_op_sequences SEED
WORLD_SIZE STEPS`` prints a seed's steps, and ``ditron.launch(run_steps, W, steps)`` replays
any list of them (a shortened one reproduces a failure faster). The tests at the end
reproduce the bugs these sequences found (all fixed).
"""

from __future__ import annotations

import math
import os
import random
import sys

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron import ops
from ditron.runtime.heap import HeapExhausted

from .poison import poison_empty

#: collective engines the CPU backend runs (``None``: the default, ``"auto"``)
ENGINES = (None, "auto", "copy_engine", "sm", "network", "tma")
AG_ENGINES = (None, "copy_engine", "colocated", "sm", "tma", "copy_engine_matmul")
RS_ENGINES = (None, "colocated", "copy_engine", "copy_engine_pull")
GEMM_METHODS = ("overlap", "overlap", "auto", "fallback")
#: kinds of step and how often each is drawn
WEIGHTS = {"all_gather": 4, "reduce_scatter": 4, "all_reduce": 4, "all_to_all": 4,
           "all_to_all_device": 2, "ag_gemm": 3, "gemm_rs": 3, "gemm_ar": 2,
           "column_linear": 1, "row_linear": 1, "release": 1, "heap": 1}
MOVED_DTYPES = ("float32", "bfloat16", "float32", "bfloat16", "float16", "int32")
FLOAT_DTYPES = ("float32", "bfloat16")


#: whether a sequence goes on after a call that raised ``HeapExhausted`` (on every rank):
#: the op must then still work (test_failed_call_leaves_collective_usable)
GO_ON_AFTER_HEAP_EXHAUSTED = True


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value else default


# -- drawing steps (on the host; the same list goes to every rank) ------------------------------
def _size(rng: random.Random, large: float = 0.0) -> int:
    """A dimension: mostly small, sometimes 0, large (enough to regrow buffers) with
    probability ``large``."""
    if rng.random() < large:
        return rng.randint(41, 130)
    r = rng.random()
    if r < 0.08:
        return 0
    return rng.randint(1, 9) if r < 0.75 else rng.randint(10, 40)


def _splits(rng: random.Random, W: int) -> list[list[int]]:
    """A send matrix ``[source][destination]``: even (a quarter of the time) or uneven with
    zeros."""
    if rng.random() < 0.25:
        c = rng.randint(0, 5)
        return [[c] * W for _ in range(W)]
    hi = rng.choice([2, 5, 12])
    return [[rng.choice([0, rng.randint(0, hi)]) for _ in range(W)] for _ in range(W)]


def _fresh(kind: str, rng: random.Random, W: int, large: float) -> dict:
    """New shape parameters of a step of ``kind`` (``large``: how often the first dim of a
    collective's input is large)."""
    if kind in ("all_gather", "reduce_scatter", "all_reduce"):
        ndim = rng.choice([1, 2, 2, 3])
        shape = [_size(rng, large if i == 0 else 0.0) for i in range(ndim)]
        if ndim == 3:
            shape = [min(s, 12) for s in shape]
        dim = rng.randrange(-ndim, ndim)
        if kind == "reduce_scatter":
            shape[dim] = W * rng.choice([0, 1, 1, 2, 3, 5, 8])
        return {"shape": shape, "dim": dim}
    if kind == "all_to_all":
        return {"matrix": _splits(rng, W),
                "row": [_size(rng, large) for _ in range(rng.randint(0, 2))]}
    if kind == "all_to_all_device":
        matrix = _splits(rng, W)
        need = max(sum(matrix[s][d] for s in range(W)) for d in range(W))
        return {"matrix": matrix, "row": [rng.randint(1, 9)],
                "cap": need + rng.choice([0, 0, 1, 7])}
    if kind == "ag_gemm":
        return {"m": _size(rng), "k": rng.randint(1, 48), "n": rng.randint(1, 40)}
    if kind == "gemm_rs":
        return {"m": rng.choice([0, 1, 2, 3, 5, 9, 17]), "k": rng.randint(1, 48),
                "n": rng.randint(1, 40)}
    if kind == "gemm_ar":
        return {"m": _size(rng), "k": rng.randint(1, 48), "n": rng.randint(1, 40)}
    if kind == "column_linear":
        return {"m": rng.randint(1, 9), "in": rng.randint(1, 24), "n": rng.randint(1, 8)}
    if kind == "row_linear":
        return {"m": rng.randint(1, 6), "k": rng.randint(1, 8), "out": rng.randint(1, 24)}
    return {}


def _options(kind: str, rng: random.Random, p: dict, W: int) -> dict:
    """The per-call options of a step of ``kind`` with shape parameters ``p``."""
    if kind == "all_gather":
        return {"dtype": rng.choice(MOVED_DTYPES), "engine": rng.choice(ENGINES),
                "out": rng.choice([None, None, "plain", "strided", "symmetric"])}
    if kind == "reduce_scatter":
        return {"dtype": rng.choice(FLOAT_DTYPES), "engine": rng.choice(ENGINES),
                "op": rng.choice(["sum", "sum", "avg", "max", "min"]),
                "out": rng.choice([None, None, "plain", "strided", "symmetric"])}
    if kind == "all_reduce":
        return {"dtype": rng.choice(FLOAT_DTYPES), "engine": rng.choice(ENGINES),
                "method": rng.choice(["auto", "one_shot", "two_shot"]),
                "op": rng.choice(["sum", "sum", "avg", "max", "min"])}
    if kind == "all_to_all":
        return {"dtype": rng.choice(MOVED_DTYPES), "engine": rng.choice(ENGINES),
                "given": rng.choice(["both", "in", "none"])}
    if kind == "all_to_all_device":
        return {"dtype": rng.choice(MOVED_DTYPES), "splits_dtype": rng.choice(["int64", "int32"])}
    if kind == "ag_gemm":
        engine = rng.choice(AG_ENGINES)
        chunk = rng.choice([None, None, 1, 2, 3, 7]) if engine not in ("colocated",) else None
        return {"dtype": rng.choice(FLOAT_DTYPES), "method": rng.choice(GEMM_METHODS),
                "engine": engine, "chunk_rows": chunk, "gathered": rng.random() < 0.4,
                "b_t": rng.random() < 0.5}
    if kind == "gemm_rs":
        engine = rng.choice(RS_ENGINES)
        chunk = None
        if engine in ("copy_engine", "copy_engine_pull") and rng.random() < 0.5:
            chunk = rng.choice([1, 2, 3, 5])
        early = rng.randrange(p["m"]) if engine == "copy_engine" and p["m"] > 1 \
            and chunk is None and rng.random() < 0.3 else None
        return {"dtype": rng.choice(FLOAT_DTYPES), "method": rng.choice(GEMM_METHODS),
                "engine": engine, "chunk_rows": chunk, "early_rows": early,
                "b_t": rng.random() < 0.5}
    if kind == "gemm_ar":
        return {"dtype": rng.choice(FLOAT_DTYPES), "method": rng.choice(GEMM_METHODS),
                "b_t": rng.random() < 0.5}
    if kind in ("column_linear", "row_linear"):
        return {"dtype": rng.choice(FLOAT_DTYPES), "method": rng.choice(GEMM_METHODS),
                "bias": rng.random() < 0.5, "sp": rng.random() < 0.6,
                "backward": rng.random() < 0.5}
    if kind == "heap":  # allocate a symmetric block (kept), or free the oldest kept one
        return {"alloc": rng.choice([0, 256, 1000, 4096, 20000]) if rng.random() < 0.6 else None}
    return {}


def draw_steps(seed: int, world_size: int, steps: int,
               kinds: tuple[str, ...] | None = None, large: float = 0.05) -> list[dict]:
    """``steps`` steps drawn from ``seed`` for ``world_size`` ranks (the same on every
    rank): each a dict with ``kind``, shape parameters, options and a data ``seed``. Half
    the time a step repeats the shape of an earlier step of its kind (so cached workspaces
    and pads are reused) with new options and data. ``large``: how often a collective's
    new shape is large (its workspaces then grow, or evict others from a small heap)."""
    rng = random.Random(f"{seed}:{world_size}")
    names = [k for k in WEIGHTS if kinds is None or k in kinds]
    weights = [WEIGHTS[k] for k in names]
    seen: dict[str, list[dict]] = {}
    out = []
    for _ in range(steps):
        kind = rng.choices(names, weights)[0]
        old = seen.setdefault(kind, [])
        if old and rng.random() < 0.5:
            shape = dict(rng.choice(old))
        else:
            shape = _fresh(kind, rng, world_size, large)
            old.append(shape)
        step = {"kind": kind, **shape, **_options(kind, rng, shape, world_size),
                "seed": rng.randrange(1 << 30)}
        refused = kind == "ag_gemm" and step["method"] == "overlap" and step["engine"] in (
            "colocated", "sm", "tma")  # host epochs: refused in graph mode (documented)
        if kind not in ("release", "heap", "all_to_all_device") and not refused \
                and rng.random() < 0.2:
            step["graph_safe"] = True  # the CUDA-graph-safe variant, eagerly
        out.append(step)
    return out


# -- running steps (in every rank) ----------------------------------------------------------------
def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _data(seed: int, rank: int, shape, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input of a step (any rank can make any rank's)."""
    g = torch.Generator().manual_seed(seed * 131 + rank * 7 + salt)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    return torch.randint(-1000, 1000, tuple(shape), generator=g).to(dtype)


def _poisoned(shape, dtype: torch.dtype, how: str | None) -> torch.Tensor | None:
    """An ``out`` for the call: ``None``, plain, strided (a transpose's view) or symmetric
    (collective), filled with NaN (integers: -1)."""
    dev = ditron.world().device
    if how is None:
        return None
    if how == "symmetric":
        try:
            t = ditron.empty(tuple(shape), dtype)
        except HeapExhausted:  # on every rank alike: a small heap full of workspaces
            t = torch.empty(tuple(shape), dtype=dtype, device=dev)
    elif how == "strided" and len(shape) >= 2:
        t = torch.empty(tuple(reversed(shape)), dtype=dtype, device=dev).t() \
            if len(shape) == 2 else torch.empty(tuple(shape), dtype=dtype,
                                                device=dev).transpose(0, -1).contiguous() \
            .transpose(0, -1)
    else:
        t = torch.empty(tuple(shape), dtype=dtype, device=dev)
    t.fill_(float("nan") if dtype.is_floating_point else -1)
    return t


class _Wrong(Exception):
    pass


def _compare(what: str, got, ref: torch.Tensor, dtype: torch.dtype, scale: float = 1.0,
             exact: bool = False) -> None:
    """Raise :class:`_Wrong` unless ``got`` has ``ref``'s shape, ``dtype`` and values
    (``ref`` in fp32 or the exact values; tolerance by dtype, relative to ``scale``)."""
    if not isinstance(got, torch.Tensor):
        raise _Wrong(f"{what}: got a {type(got).__name__}")
    if got.dtype != dtype or tuple(got.shape) != tuple(ref.shape):
        raise _Wrong(f"{what}: got {tuple(got.shape)} {got.dtype}, want {tuple(ref.shape)} "
                     f"{dtype}")
    g = got.detach().cpu()
    if exact or not dtype.is_floating_point:
        if not torch.equal(g.view(torch.uint8) if g.dtype == torch.bool else g,
                           ref.to(dtype)):
            bad = (g.float() != ref.to(dtype).float()).nonzero()
            raise _Wrong(f"{what}: {len(bad)} elements differ, first at {bad[0].tolist()}")
        return
    tol = 1e-4 if dtype == torch.float32 else 3e-2 if dtype == torch.bfloat16 else 4e-3
    g = g.float()
    if g.isnan().any():
        bad = g.isnan().nonzero()
        raise _Wrong(f"{what}: {len(bad)} NaN elements (unwritten?), first at "
                     f"{bad[0].tolist()}")
    err = (g - ref).abs()
    limit = tol * (max(scale, 1.0) + ref.abs())
    if (err > limit).any():
        bad = (err > limit).nonzero()
        raise _Wrong(f"{what}: {len(bad)} elements wrong, first at {bad[0].tolist()} (got "
                     f"{g[tuple(bad[0])].item()}, want {ref[tuple(bad[0])].item()}), largest "
                     f"error {err.max().item()}")


def _reduced(xs: list[torch.Tensor], op: str) -> tuple[torch.Tensor, float]:
    """The fp32 reduction of ``xs`` with ``op`` and the scale of its rounding error."""
    f = torch.stack([x.float() for x in xs])
    scale = f.abs().sum(0).max().item() if f.numel() else 1.0
    if op == "sum":
        return f.sum(0), scale
    if op == "avg":
        return f.mean(0), scale / len(xs)
    return (f.amax(0) if op == "max" else f.amin(0)), 0.0


def _sum_products(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, float]:
    prods = [a.float() @ b.float() for a, b in parts]
    scale = sum(p.abs() for p in prods).max().item() if prods[0].numel() else 1.0
    return sum(prods), scale


def _weight(s: dict, k: int, n: int, dtype: torch.dtype, rank: int = 0) -> torch.Tensor:
    """A ``[k, n]`` operand: half the time a transposed ``[n, k]`` weight."""
    if s["b_t"]:
        return _data(s["seed"], rank, (n, k), dtype, salt=1).t()
    return _data(s["seed"], rank, (k, n), dtype, salt=1)


def _unchanged(what: str, x: torch.Tensor, copy: torch.Tensor) -> None:
    if not torch.equal(x.cpu().view(torch.uint8) if x.dtype == torch.bool else x.cpu(), copy):
        raise _Wrong(f"{what}: the op modified its input")


def _step(s: dict, kept: list[torch.Tensor]) -> None:
    """Run step ``s`` on this rank and check it (raises :class:`_Wrong` or the op's error)."""
    from ditron.ops.collectives import release_workspaces

    w = ditron.world()
    W, me, dev = w.world_size, w.rank, w.device
    kind, seed = s["kind"], s["seed"]
    what = describe(s)
    if kind == "release":
        release_workspaces()
        return
    if kind == "heap":
        if s["alloc"] is not None:
            try:
                kept.append(ditron.empty((s["alloc"],), torch.uint8))
            except HeapExhausted:  # on every rank alike
                pass
        elif kept:
            ditron.free(kept.pop(0))
        return
    dtype = _dtype(s["dtype"])
    if kind in ("all_gather", "reduce_scatter", "all_reduce"):
        xs = [_data(seed, r, s["shape"], dtype) for r in range(W)]
        x = xs[me].to(dev)
        copy = x.cpu().clone()
        d = s["dim"] % len(s["shape"])
        if kind == "all_gather":
            ref = torch.cat(xs, d)
            out = _poisoned(ref.shape, dtype, s["out"])
            got = ops.all_gather(x, s["dim"], engine=s["engine"], out=out)
            if out is not None and got is not out:
                raise _Wrong(f"{what}: did not return out")
            _compare(what, got, ref, dtype, exact=True)
        elif kind == "reduce_scatter":
            total, scale = _reduced(xs, s["op"])
            ref = total.chunk(W, d)[me] if total.shape[d] else total.narrow(d, 0, 0)
            out = _poisoned(ref.shape, dtype, s["out"])
            got = ops.reduce_scatter(x, s["dim"], op=s["op"], engine=s["engine"], out=out)
            if out is not None and got is not out:
                raise _Wrong(f"{what}: did not return out")
            _compare(what, got, ref, dtype, scale)
        else:
            ref, scale = _reduced(xs, s["op"])
            got = ops.all_reduce(x, s["method"], op=s["op"], engine=s["engine"])
            _compare(what, got, ref, dtype, scale)
        _unchanged(what, x, copy)
        if s.get("out") == "symmetric" and out is not None and ditron.is_symmetric(out):
            ditron.free(out)
        return
    if kind in ("all_to_all", "all_to_all_device"):
        matrix, row = s["matrix"], s["row"]
        xs = [_data(seed, r, (sum(matrix[r]), *row), dtype) for r in range(W)]
        pieces = [list(x.split(matrix[r])) for r, x in enumerate(xs)]
        mine = [pieces[r][me] for r in range(W)]
        ref = torch.cat(mine) if mine else torch.empty(0, *row, dtype=dtype)
        x = xs[me].to(dev)
        copy = x.cpu().clone()
        if kind == "all_to_all":
            uniform = len({c for r in matrix for c in r}) <= 1
            ins = matrix[me] if s["given"] != "none" or not uniform else None
            outs = [matrix[r][me] for r in range(W)] if s["given"] == "both" else None
            got = ops.all_to_all(x, ins, outs, engine=s["engine"])
            _compare(what, got, ref, dtype, exact=True)
        else:
            splits = torch.tensor(matrix[me], dtype=_dtype(s["splits_dtype"]), device=dev)
            got, got_splits = ops.all_to_all_device(x, splits, s["cap"])
            want = [matrix[r][me] for r in range(W)]
            if got_splits.cpu().tolist() != want:
                raise _Wrong(f"{what}: out_splits {got_splits.cpu().tolist()}, want {want}")
            if tuple(got.shape) != (s["cap"], *row):
                raise _Wrong(f"{what}: out is {tuple(got.shape)}, want {(s['cap'], *row)}")
            rows = min(s["cap"], ref.shape[0])
            _compare(what, got[:rows], ref[:rows], dtype, exact=True)
        _unchanged(what, x, copy)
        return
    if kind == "ag_gemm":
        m, k, n = s["m"], s["k"], s["n"]
        as_ = [_data(seed, r, (m, k), dtype) for r in range(W)]
        b = _weight(s, k, n, dtype)
        gathered = torch.cat(as_)
        ref, scale = _sum_products([(gathered, b)])
        a = as_[me].to(dev)
        got = ops.ag_gemm(a, b.to(dev), return_gathered=s["gathered"], method=s["method"],
                          engine=s["engine"], chunk_rows=s["chunk_rows"])
        if s["gathered"]:
            if not isinstance(got, tuple) or len(got) != 2:
                raise _Wrong(f"{what}: did not return (c, gathered)")
            got, g = got
            _compare(what + " (gathered)", g, gathered, dtype, exact=True)
        _compare(what, got, ref, dtype, scale)
        _unchanged(what, a, as_[me])
        return
    if kind in ("gemm_rs", "gemm_ar"):
        m, k, n = s["m"], s["k"], s["n"]
        M = W * m if kind == "gemm_rs" else m
        parts = [(_data(seed, r, (M, k), dtype), _weight(s, k, n, dtype, r)) for r in range(W)]
        total, scale = _sum_products(parts)
        a, b = parts[me][0].to(dev), parts[me][1].to(dev)
        if kind == "gemm_rs":
            got = ops.gemm_rs(a, b, method=s["method"], engine=s["engine"],
                              chunk_rows=s["chunk_rows"], early_rows=s["early_rows"])
            ref = total[me * m:(me + 1) * m]
        else:
            got = ops.gemm_ar(a, b, method=s["method"])
            ref = total
        _compare(what, got, ref, dtype, scale)
        _unchanged(what, a, parts[me][0])
        return
    if kind in ("column_linear", "row_linear"):
        _linear_step(s, what, dtype)
        return
    raise ValueError(f"unknown step kind {kind!r}")


def _linear_step(s: dict, what: str, dtype: torch.dtype) -> None:
    """A ``ditron.nn`` parallel linear layer's forward (and with ``backward``, the input's,
    weight's and bias's gradients of ``(y * r).sum()``, ``r`` random) against fp32 torch on
    the whole layer."""
    w = ditron.world()
    W, me, dev = w.world_size, w.rank, w.device
    seed, sp, column = s["seed"], s["sp"], s["kind"] == "column_linear"
    m = s["m"]
    if column:  # weight [W n, in] split by rows; x [m, in], sequence-split when sp
        fin, fout = s["in"], W * s["n"]
        mine = (slice(me * s["n"], (me + 1) * s["n"]), slice(None))
    else:  # weight [out, W k] split by columns; x [M, k] (this rank's features)
        fin, fout = W * s["k"], s["out"]
        mine = (slice(None), slice(me * s["k"], (me + 1) * s["k"]))
    weight = _data(seed, 0, (fout, fin), dtype, salt=1) / math.sqrt(fin)
    bias = _data(seed, 0, (fout,), dtype, salt=2) if s["bias"] else None
    cls = ditron.nn.ColumnParallelLinear if column else ditron.nn.RowParallelLinear
    layer = cls(fin, fout, s["bias"], sequence_parallel=sp, method=s["method"], dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight[mine])
        if bias is not None:
            layer.bias.copy_(bias[mine[0]] if column else bias)
    # the whole layer's input, in fp32 with gradients: [rows, fin]
    if column:
        xs = [_data(seed, r if sp else 0, (m, fin), dtype) for r in range(W)]
        full = torch.cat(xs) if sp else xs[0]
        x_mine = xs[me]
    else:
        rows = W * m if sp else m
        full = _data(seed, 0, (rows, fin), dtype)
        x_mine = full[:, mine[1]]
    # copies: in fp32 ``.float()`` returns the tensor itself, and the layer's input (a view
    # of it, or itself) would share its gradient (on CUDA x became a non-leaf copy of it)
    xf = full.float().clone().requires_grad_(s.get("backward", False))
    wf = weight.float().clone().requires_grad_(s.get("backward", False))
    bf = (bias.float().clone().requires_grad_(s.get("backward", False)) if bias is not None
          else None)
    y_full = torch.nn.functional.linear(xf, wf, bf)
    # this rank's part of the output: its output features (column), its rows (row, sp)
    if column:
        y_ref = y_full[:, mine[0]]
    else:
        y_ref = y_full[me * m:(me + 1) * m] if sp else y_full
    x = x_mine.to(dev).requires_grad_(s.get("backward", False))
    y = layer(x)
    scale = y_ref.detach().abs().max().item() if y_ref.numel() else 1.0
    _compare(what, y, y_ref.detach(), dtype, scale + 1.0)
    if not s.get("backward"):
        return
    # the output's gradient: per rank where the output is split, the same where replicated
    replicated = not column and not sp
    r = _data(seed, 0 if replicated else me, tuple(y_ref.shape), dtype, salt=3)
    rs = [_data(seed, 0 if replicated else q, tuple(y_ref.shape), dtype, salt=3)
          for q in range(W)]
    # the whole layer's loss: every rank's (y_q * r_q).sum(), once for a replicated output
    if column:
        n = s["n"]
        loss = sum((y_full[:, q * n:(q + 1) * n] * rs[q].float()).sum() for q in range(W))
    elif sp:
        loss = sum((y_full[q * m:(q + 1) * m] * rs[q].float()).sum() for q in range(W))
    else:
        loss = (y_full * rs[0].float()).sum()
    loss.backward()
    (y * r.to(dev)).sum().backward()
    gscale = max(xf.grad.abs().max().item() if xf.grad.numel() else 1.0,
                 wf.grad.abs().max().item() if wf.grad.numel() else 1.0) + 1.0
    gx = xf.grad
    if column:
        gx = gx[me * m:(me + 1) * m] if sp else gx
    else:
        gx = gx[:, mine[1]]
    _compare(what + " input grad", x.grad, gx, dtype, gscale)
    _compare(what + " weight grad", layer.weight.grad, wf.grad[mine], dtype, gscale)
    if bias is not None:
        gb = bf.grad[mine[0]] if column else bf.grad
        _compare(what + " bias grad", layer.bias.grad, gb, dtype, gscale)


def describe(s: dict) -> str:
    """One line naming a step's call."""
    fields = ", ".join(f"{k}={v!r}" for k, v in s.items() if k not in ("kind", "seed")
                       and v is not None)
    return f"{s['kind']}({fields})"


def run_steps(steps: list[dict], stats: dict | None = None) -> list[str]:
    """Run ``steps`` on this rank (inside ``ditron.launch``): the failures, as lines naming
    the step. A wrong result is recorded and the sequence goes on; an error stops it (the
    ranks may no longer be in step); ``HeapExhausted`` (raised on every rank alike: a small
    heap that holds the user's blocks, or see test_full_heap_* below) ends it too, without
    a failure (see ``GO_ON_AFTER_HEAP_EXHAUSTED``). ``stats`` (if given) gets the count of
    such calls and of the workspace evictions."""
    from ditron.ops.workspaces import evictions

    poison_empty()
    kept: list[torch.Tensor] = []
    wrong = []
    exhausted = 0
    for i, s in enumerate(steps):
        try:
            if s.get("graph_safe") and not (
                    ditron.world().local_world_size < ditron.world().world_size
                    and s.get("method") == "overlap" and (s["kind"] in ("ag_gemm", "column_linear")
                                                     or s.get("backward"))):
                # ag_gemm(method="overlap") is refused in graph mode across nodes (documented)
                with ops.graph_safe():
                    _step(s, kept)
            else:
                _step(s, kept)
        except _Wrong as e:
            wrong.append(f"step {i}: {e}")
        except HeapExhausted:
            exhausted += 1
            if not GO_ON_AFTER_HEAP_EXHAUSTED:
                break
        except Exception as e:  # noqa: BLE001 - the report names it
            wrong.append(f"step {i}: {describe(s)}: raised {type(e).__name__}: "
                         f"{str(e)[:400]}")
            break
    if stats is not None:
        stats.update(exhausted=exhausted, evictions=evictions())
    return wrong


def _run_with_stats(steps: list[dict]) -> tuple[list[str], dict]:
    stats: dict = {}
    return run_steps(steps, stats), stats


def run_seed(seed: int, world_size: int, steps: int, backend: str = "cpu",
             kinds: tuple[str, ...] | None = None,
             large: float = 0.05) -> tuple[list[list[str]], dict]:
    """The failures of every rank for the sequence of ``seed``, and rank 0's stats
    (:func:`run_steps`)."""
    got = ditron.launch(_run_with_stats, world_size,
                        draw_steps(seed, world_size, steps, kinds, large), backend=backend)
    return [wrong for wrong, _ in got], got[0][1]


# -- tests ----------------------------------------------------------------------------------------
#: CI's bounded sequences: (world size, steps, heap size, ranks per node, first seed, how
#: often a new collective shape is large). The small heaps make the ops' workspaces evict
#: each other mid-sequence (``ops/workspaces.py``; their seeds were picked because they do,
#: which the test checks); ranks per node below the world size simulate two nodes (the
#: network paths between them)
CI_RUNS = [(1, 30, None, None, 0, 0.05), (2, 80, None, None, 0, 0.05),
           (3, 50, None, None, 0, 0.05), (4, 32, None, None, 0, 0.05),
           (2, 50, "48K", None, 1, 0.3), (3, 30, "64K", None, 0, 0.3),
           (4, 24, None, 2, 0, 0.05)]


@pytest.mark.parametrize("world_size,steps,heap,per_node,seed,large", CI_RUNS, ids=[
    f"W{w}-{n}steps" + (f"-heap{h}" if h else "") + (f"-{p}pernode" if p else "")
    for w, n, h, p, _, _ in CI_RUNS])
def test_fuzz_op_sequences(world_size, steps, heap, per_node, seed, large, backend,
                           monkeypatch):
    if heap is not None:
        monkeypatch.setenv("DITRON_HEAP_SIZE", heap)
    if per_node is not None:
        monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", str(per_node))
    steps = _env_int("DITRON_FUZZ_STEPS", steps)
    first = _env_int("DITRON_FUZZ_SEED", seed)
    failures, evicted = {}, 0
    for s in range(first, first + _env_int("DITRON_FUZZ_SEEDS", 1)):
        got, stats = run_seed(s, world_size, steps, backend, large=large)
        evicted += stats["evictions"]
        if any(got):
            failures[s] = got
    assert not failures, failures
    if heap is not None and first == seed:  # the point of the small heap
        assert evicted, "no workspace was evicted: the heap was not small enough"


# -- reproducers of the bugs the sequences found (fixed) ------------------------
def _even_then_uneven_all_to_all() -> list[list[float]]:
    me = ditron.world().rank
    x = torch.arange(12.0).view(4, 3) + 100 * me
    ops.all_to_all(x)  # even splits on every rank: the shape is remembered as even
    # rank 1's own splits happen to be even, rank 0's are not: a valid call
    return ops.all_to_all(x, [1, 3] if me == 0 else [2, 2]).tolist()


def test_all_to_all_even_row_in_uneven_call(monkeypatch):
    """A rank whose own splits are even in an uneven call, at a shape first called without
    splits: it skipped the host gather its peers made (gloo mismatch or a wait timeout)."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "5")
    x = [torch.arange(12.0).view(4, 3) + 100 * r for r in range(2)]
    want = [torch.cat([x[0][:1], x[1][:2]]).tolist(), torch.cat([x[0][1:], x[1][2:]]).tolist()]
    assert ditron.launch(_even_then_uneven_all_to_all, 2) == want


def _new_collective_on_full_heap() -> list[float]:
    from ditron.runtime.world import current

    heap = current().heap
    ops.all_gather(torch.ones(2000))  # a cached inbox of 2 x 16 KiB, free to evict
    filler = ditron.empty((sum(size for _, size in heap._free),), torch.uint8)  # noqa: F841
    # the exchange's signal pad, made on this op's first call, does not evict that inbox
    return ops.all_reduce(torch.ones(4), "one_shot", engine="copy_engine").tolist()


def test_full_heap_evicts_for_a_new_collective_pad(monkeypatch):
    """A collective's first call made its signal pad outside workspaces.allocate, so a heap
    full of cached workspaces raised HeapExhausted instead of evicting them."""
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    assert ditron.launch(_new_collective_on_full_heap, 2) == [[2.0] * 4] * 2


def _pads_between_workspaces() -> float:
    ops.all_gather(torch.ones(1000))  # inbox 2 x 8 KiB
    ops.all_reduce(torch.ones(4), "one_shot", engine="copy_engine")  # its pad: after it
    ops.all_to_all(torch.ones(1000 * ditron.world().world_size))  # inbox 2 x 8 KiB
    ops.reduce_scatter(torch.ones(8 * ditron.world().world_size))  # its pad: after that
    # 2 x 16 KiB of a 64 KiB heap that holds only 1.25 KiB of signal pads once the
    # workspaces are evicted, but they are spread over it: no block of 32 KiB is left
    return ops.all_gather(torch.ones(2000)).sum().item()


def test_full_heap_live_pads_do_not_fragment_it(monkeypatch):
    """Live signal pads were allocated first-fit between the workspaces and stayed when
    workspaces.allocate evicted them, so an op needing half the heap failed with the heap
    almost empty (pads now sit at the heap's top)."""
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    assert ditron.launch(_pads_between_workspaces, 2) == [4000.0, 4000.0]


def _collective_after_failed_calls() -> list[float]:
    for _ in range(2):
        with pytest.raises(HeapExhausted):  # a 2 x 64 KiB inbox on a 64 KiB heap
            ops.all_reduce(torch.ones(5000), "one_shot", engine="copy_engine")
    # each failed call took an epoch of the exchange's pad and acknowledged nothing: this
    # call waits for the acknowledgement of the call two epochs back, which never comes
    return ops.all_reduce(torch.ones(4), "one_shot", engine="copy_engine").tolist()


def test_failed_call_leaves_collective_usable(monkeypatch):
    """A call that raised HeapExhausted had taken an epoch it never acknowledged; after two,
    the op's next call waited forever (WaitTimeoutError on CPU, a hang on CUDA)."""
    monkeypatch.setenv("DITRON_HEAP_SIZE", "64K")
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "5")
    assert ditron.launch(_collective_after_failed_calls, 2) == [[2.0] * 4] * 2


def _empty_integer_tensors() -> list[str]:
    W = ditron.world().world_size
    wrong = []
    for what, call, shape in [
            ("all_gather int32 [3, 0]", lambda: ops.all_gather(
                torch.zeros(3, 0, dtype=torch.int32)), (3 * W, 0)),
            ("all_gather int16 [3, 0]", lambda: ops.all_gather(
                torch.zeros(3, 0, dtype=torch.int16)), (3 * W, 0)),
            ("all_gather int32 [2, 0, 4] dim=-1", lambda: ops.all_gather(
                torch.zeros(2, 0, 4, dtype=torch.int32), -1), (2, 0, 4 * W)),
            ("all_to_all int32 [W, 0]", lambda: ops.all_to_all(
                torch.zeros(W, 0, dtype=torch.int32)), (W, 0))]:
        try:
            got = call()
            if tuple(got.shape) != shape:
                wrong.append(f"{what}: shape {tuple(got.shape)}")
        except RuntimeError as e:
            wrong.append(f"{what}: {e}")
    return wrong


@pytest.mark.parametrize("world_size", [1, 2])
def test_empty_integer_tensors_are_moved(world_size):
    """An empty tensor of a widened dtype (int32 moved as int64) could not be viewed (torch
    checks the strides of empty tensors too)."""
    assert ditron.launch(_empty_integer_tensors, world_size) == [[]] * world_size


def _outs_contiguous_with_other_strides() -> list[str]:
    W = ditron.world().world_size
    wrong = []
    out = torch.empty(1, 2 * W).t()  # [2 W, 1] with strides (1, 2 W): contiguous
    try:
        if not torch.equal(ops.all_gather(torch.ones(2, 1), out=out), torch.ones(2 * W, 1)):
            wrong.append("all_gather: wrong values")
    except RuntimeError as e:
        wrong.append(f"all_gather: {e}")
    out = torch.empty(3, 1).t()  # [1, 3] with strides (1, 1)
    try:
        if not torch.equal(ops.reduce_scatter(torch.ones(W, 3), out=out),
                           torch.full((1, 3), float(W))):
            wrong.append("reduce_scatter: wrong values")
    except RuntimeError as e:
        wrong.append(f"reduce_scatter: {e}")
    return wrong


def test_out_view_of_itself_with_other_strides():
    """A result that is a view of ``out``'s memory with other strides in dims of size 1 was
    copied into ``out``, which torch refuses (overlapping memory)."""
    assert ditron.launch(_outs_contiguous_with_other_strides, 2) == [[]] * 2


def _group():
    from ditron.runtime.world import current

    return current().host_group


def _summed(x: torch.Tensor) -> torch.Tensor:
    """The fp32 sum of ``x`` over ranks."""
    total = x.float().cpu()
    dist.all_reduce(total, group=_group())
    return total


def _gathered(x: torch.Tensor, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(x.cpu()) for _ in range(ditron.world().world_size)]
    dist.all_gather(parts, x.cpu().contiguous(), group=_group())
    return torch.cat(parts, dim)


#: engines taken call after call by one op: every pair of neighbours, and each engine two
#: calls apart from the other (an exchange's inbox half comes back every second call)
ENGINE_TURNS = ("copy_engine", "network", "network", "copy_engine", "sm", "network",
                "copy_engine", "copy_engine", "sm", "sm", "copy_engine")


def _engine_turns() -> list[str]:
    """Each collective called with the engines of ``ENGINE_TURNS`` in turn (one node)."""
    poison_empty()
    W, me = ditron.world().world_size, ditron.world().rank
    g = torch.Generator().manual_seed(100 + me)
    wrong = []
    for name in ("all_reduce one_shot", "all_reduce two_shot", "all_gather",
                 "reduce_scatter", "all_to_all"):
        for i, engine in enumerate(ENGINE_TURNS):
            x = torch.randn(2 * W, 3, generator=g).to(ditron.world().device)
            if name.startswith("all_reduce"):
                got = ops.all_reduce(x, method=name.split()[1], engine=engine)
                ref = _summed(x)
            elif name == "all_gather":
                got, ref = ops.all_gather(x, engine=engine), _gathered(x, 0)
            elif name == "reduce_scatter":
                got = ops.reduce_scatter(x, engine=engine)
                ref = _summed(x)[2 * me:2 * me + 2]
            else:
                got = ops.all_to_all(x, [2] * W, engine=engine)
                ref = torch.empty_like(x.cpu())
                dist.all_to_all_single(ref, x.cpu(), group=_group())
            if not torch.allclose(got.cpu(), ref, rtol=1e-5, atol=1e-5):
                wrong.append(f"{name} call {i} engine {engine}")
    return wrong


@pytest.mark.parametrize("world_size", [2, 3])
def test_engines_switched_between_calls(world_size, backend):
    """The network engine's calls acknowledge their inboxes to node peers too: a copy-engine
    call two calls after a network one waited for an acknowledgement nobody sent."""
    assert ditron.launch(_engine_turns, world_size, backend=backend) == [[]] * world_size


if __name__ == "__main__":  # print the steps of a seed: SEED WORLD_SIZE STEPS
    for i, step in enumerate(draw_steps(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))):
        print(i, step)
