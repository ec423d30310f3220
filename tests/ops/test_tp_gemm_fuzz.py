"""Property fuzz of ``ag_gemm`` / ``gemm_rs`` / ``gemm_ar`` against float64 torch references.

Each launch runs a seeded sequence of random calls, the same on every rank (the seed picks
the op, dtype, shapes, layouts and options; each rank's data is its own): rows per rank
that are 0, 1, a whole number of CPU tiles (16, 32: the in-place own rows of AG-GEMM) or
not; K and N from 0 up, odd and not multiples of the tiles; fp32 / bf16 / fp16; ``a`` and
``b`` contiguous, transposed, sliced with steps or expanded (zero strides); every method,
engine, ``chunk_rows``, ``early_rows``, ``return_gathered`` and random tile configs; some
calls eagerly inside ``ditron.ops.graph_safe()`` (the graph-safe variants). Shapes change
from call to call (workspace and signal reuse across shapes); outputs are poisoned, the
inputs must come back unchanged, and the results of earlier calls must stay as they were
(no result aliases a workspace). Now and then a call with options that no path takes
(``_REFUSALS``: a chunking with the colocated engine or, for ``gemm_rs``, left to
``method="auto"``, ``early_rows`` without the pushed engine, bad chunk sizes) must raise on
every rank, whatever its method, shapes and mode."""

from __future__ import annotations

import contextlib
import random

import pytest
import torch

import ditron
from ditron.kernels.gemm import GemmConfig

from .poison import poison_empty
from .test_tp_gemm import TOL, _gather, _sum

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _matrix(rng: random.Random, rows: int, cols: int, dtype: torch.dtype, device,
            g: torch.Generator) -> tuple[torch.Tensor, str]:
    """A ``[rows, cols]`` operand in a random layout (named)."""
    kind = rng.choice(["contiguous", "transposed", "stepped", "expanded"])

    def full(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device, dtype)

    if kind == "transposed":
        return full(cols, rows).t(), kind
    if kind == "stepped":
        return full(2 * rows, cols + 3)[::2, 1:cols + 1], kind
    if kind == "expanded":
        return full(1, cols).expand(rows, cols), kind
    return full(rows, cols), kind


def _options(rng: random.Random, op: str, m: int, graph: bool) -> dict:
    kw: dict = {}
    if op == "ag_gemm":
        kw["engine"] = rng.choice([None, "copy_engine", "colocated", "sm", "tma",
                                   "copy_engine_matmul"])
        if rng.random() < 0.3 and m > 1:
            chunk = rng.randint(1, m)  # drawn anyway: the seeds' later draws stay as they were
            if kw["engine"] != "colocated":  # it moves tiles: a chunking raises (_refusal)
                kw["chunk_rows"] = chunk
        kw["return_gathered"] = rng.random() < 0.5
    elif op == "gemm_rs":
        kw["engine"] = rng.choice([None, "colocated", "copy_engine", "copy_engine_pull"])
        if kw["engine"] in ("copy_engine", "copy_engine_pull") and m > 1 and rng.random() < 0.4:
            kw["chunk_rows"] = (rng.randint(1, m) if rng.random() < 0.5
                                else (m - m // 3, m // 3) if m >= 3 else m)
        elif kw["engine"] == "copy_engine" and m > 1 and rng.random() < 0.4:
            kw["early_rows"] = rng.randint(0, m - 1)
    if rng.random() < 0.3:
        kw["config"] = GemmConfig(block_m=rng.choice([16, 32]), block_n=rng.choice([16, 32, 64]),
                                  block_k=rng.choice([16, 32]), group_m=rng.randint(1, 4),
                                  num_warps=1, num_stages=1, programs=rng.randint(1, 3),
                                  flatten=rng.random() < 0.5, tma_store=rng.random() < 0.5)
    if graph and kw.get("engine") in ("colocated", "sm", "tma"):
        kw["engine"] = None  # no graph-safe variant: "overlap" raises (tested elsewhere)
    return {k: v for k, v in kw.items() if v is not None}


#: option combinations every path refuses, whatever the method, the tuner or the shapes:
#: (op, keyword arguments given m rows per rank, the start of the error every rank raises)
_CHUNKS_MOVED = r"^ditron\.ops\.{op}: chunk_rows applies to the engines that move chunks"
_REFUSALS = (
    ("ag_gemm", lambda m: {"engine": "colocated", "chunk_rows": max(m, 1)},
     _CHUNKS_MOVED.format(op="ag_gemm")),
    ("gemm_rs", lambda m: {"engine": "colocated", "chunk_rows": max(m, 1)},
     _CHUNKS_MOVED.format(op="gemm_rs")),
    ("gemm_rs", lambda m: {"chunk_rows": max(m // 2, 1)},
     r"^ditron\.ops\.gemm_rs: chunk_rows applies to engine='copy_engine' or "
     r"'copy_engine_pull' only, and needs it named"),
    ("gemm_rs", lambda m: {"early_rows": m - 1} if m > 1 else None,
     r"^ditron\.ops\.gemm_rs: early_rows applies to engine='copy_engine' only, and needs "
     r"it named"),
    ("gemm_rs", lambda m: {"engine": "copy_engine_pull", "early_rows": m - 1} if m > 1 else None,
     r"^ditron\.ops\.gemm_rs: early_rows applies to engine='copy_engine' only, not "
     r"'copy_engine_pull'"),
    ("gemm_rs", lambda m: {"engine": "copy_engine", "chunk_rows": (m, 1)},
     r"^ditron\.ops\.gemm_rs: chunk_rows as a sequence gives the rows of each chunk"),
)


def _refusal(bad: random.Random, op: str, m: int) -> tuple[dict, str] | None:
    """Now and then (drawn from ``bad``, not the seed's generator, so the valid calls stay
    those the seed always made) an invalid option combination for ``op`` with ``m`` rows
    per rank, and the error it must raise on every rank and path; else ``None``."""
    kinds = [(kw(m), match) for name, kw, match in _REFUSALS if name == op]
    kinds = [(kw, match) for kw, match in kinds if kw is not None]
    if not kinds or bad.random() >= 0.3:
        return None
    return bad.choice(kinds)


def _fuzz_case(seed: int, calls: int, graphs: bool) -> list[str]:
    """``calls`` random calls; returns their descriptions (the same on every rank)."""
    poison_empty()
    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    rng = random.Random(seed)  # the same choices on every rank
    bad = random.Random(f"refusals:{seed}")  # the invalid calls, also the same on every rank
    seen, earlier = [], []
    for i in range(calls):
        op = rng.choice(["ag_gemm", "gemm_rs", "gemm_ar"])
        dtype = rng.choice(DTYPES)
        m = rng.choice([0, 1, 2, 5, 13, 16, 17, 32, 33])
        K = rng.choice([0, 1, 3, 7, 20, 33])
        N = rng.choice([0, 1, 3, 17, 40])
        method = rng.choice(["overlap", "overlap", "fallback", "auto"])
        graph = graphs and rng.random() < 0.4 and w.local_world_size == W
        kw = _options(rng, op, m, graph)
        rows = {"ag_gemm": m, "gemm_rs": W * m, "gemm_ar": W * m + rng.choice([0, 1])}[op]
        g = torch.Generator().manual_seed(1000 * seed + 10 * i + rank)
        a, a_kind = _matrix(rng, rows, K, dtype, dev, g)
        if op == "ag_gemm":  # every rank's b alike, as a replicated weight
            g.manual_seed(1000 * seed + 10 * i + W)
        b, b_kind = _matrix(rng, K, N, dtype, dev, g)
        what = (f"#{i} {op} {dtype} m={m} rows={rows} K={K} N={N} a={a_kind} b={b_kind} "
                f"method={method} graph_safe={graph} {kw}")
        seen.append(what)
        refused = _refusal(bad, op, m)
        if refused is not None:  # raises on every rank, whatever path the call would take
            bad_kw, match = refused
            with ditron.ops.graph_safe() if graph else contextlib.nullcontext(), \
                    pytest.raises(ValueError, match=match):
                getattr(ditron.ops, op)(a, b, method=method, **bad_kw)
            seen.append(f"#{i} refused {op} method={method} graph_safe={graph} {bad_kw}")
        a0, b0 = a.clone(), b.clone()
        a64, b64 = a.double().cpu(), b.double().cpu()
        if op == "ag_gemm":
            gathered = _gather(a).cpu().double()
            ref, scale = gathered @ b64, gathered.abs() @ b64.abs()
        else:
            ref, scale = _sum(a64 @ b64), _sum(a64.abs() @ b64.abs())
            if op == "gemm_rs":
                ref, scale = ref[rank * m:(rank + 1) * m], scale[rank * m:(rank + 1) * m]
        with ditron.ops.graph_safe() if graph else contextlib.nullcontext():
            got = getattr(ditron.ops, op)(a, b, method=method, **kw)
        results = list(got) if isinstance(got, tuple) else [got]
        c = results[0]
        assert c.shape == ref.shape and c.dtype == dtype, f"{what}: {c.shape} {c.dtype}"
        c64 = c.double().cpu()
        assert torch.isfinite(c64).all(), f"{what}: unwritten (NaN) elements"
        if ref.numel():  # scale: the sum of |products|, so cancellation does not matter
            err = (c64 - ref).abs().max().item()
            assert err <= TOL[dtype] * max(scale.max().item(), 1e-6), f"{what}: error {err}"
        if kw.get("return_gathered"):
            assert torch.equal(results[1].cpu(), _gather(a).cpu()), f"{what}: gathered A differs"
        assert torch.equal(a, a0) and torch.equal(b, b0), f"{what}: an input changed"
        for j, (old, copy) in enumerate(earlier):
            assert torch.equal(old, copy), f"{what}: the result of call {j} changed"
        earlier = (earlier + [(r, r.clone()) for r in results])[-6:]
    return seen


@pytest.mark.parametrize("world_size, seed", [(1, 1), (2, 2), (3, 3), (4, 4)])
def test_tp_gemm_fuzz(world_size, seed, backend):
    res = ditron.launch(_fuzz_case, world_size, seed, 24, True, backend=backend)
    assert all(r == res[0] for r in res)
    assert sum(" refused " not in what for what in res[0]) == 24


@pytest.mark.parametrize("world_size", [4, 3])
def test_tp_gemm_fuzz_two_simulated_nodes(world_size, backend, monkeypatch):
    # 2 ranks per simulated node: AG-GEMM's hierarchical plan (4 ranks) or the fallback
    # (3: nodes of unequal size); GEMM-RS / GEMM-AR fall back across nodes
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    res = ditron.launch(_fuzz_case, world_size, 10 + world_size, 16, False, backend=backend)
    assert all(r == res[0] for r in res)
    assert sum(" refused " not in what for what in res[0]) == 16
