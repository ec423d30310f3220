"""Random task graphs run as megakernels, against the same computation in plain torch.

A graph is drawn on the host from one seed (:func:`draw_graph`), the same on every rank:
a few 2-d fp32 tensors (shapes that do not divide into the tiles, some empty, some
transposed views, some symmetric) and tasks over them in program order, each of a kind:

* ``affine``: ``y[box] = alpha * x[box] + beta`` over a sub-box of the tensors, in tiles of
  random sizes (producer and consumer tiles straddle each other), sometimes in place,
  sometimes reading the rows mirrored (``flip``: tile reads another tile's rows), and on
  more than one rank: reading ``x`` on rank ``rank + x_shift`` (a pull), writing ``y`` on
  rank ``rank + y_shift`` (a push);
* ``rowsum``: ``y[rows, col] = x[rows, :].sum(1)`` (a reduction over a whole row band);
* ``allsum``: ``y[box] = sum over ranks q of x[box] on q`` (reads every rank's copy);
* ``matmul``: ``c = a @ b`` with the library's ``kernels.tiles.matmul_tile``;
* ``mlp``: the three tasks of ``task.tp_mlp.add_tp_mlp`` (the library's SwiGLU, split-K
  push into every rank's inbox and reduce tiles, random ``MlpBlocks``, sometimes through
  TMA descriptors), over pool tensors: its scratch ``h`` and ``inbox`` may be reused by
  later MLPs and read or overwritten by other tasks.

Reads after writes, writes after reads and independent tasks come from the random choice
of tensors. Each task may have a random tile order per rank (``order=``); the megakernel a
random program count and ``num_warps``, its tile functions called out of line or inlined,
sometimes a trace (every item once; an item starts only after the local items it waits
for ended); sometimes the graph is compiled twice and the calls alternate between the two
megakernels (two scoreboards over the same tensors). Each graph is called several times on
fresh inputs (the scoreboard's epochs: stale signals of an earlier call must not satisfy a
later one). The reference runs every task on every rank's copies in float64, in program
order (what the derived waits must give, since tiles of one task are independent); every
rank computes it for all ranks from the seed, so it needs no communication.

CI runs a bounded number of graphs (``CI_RUNS``: world sizes 1-3). Environment, for longer
hunts:

* ``DITRON_FUZZ_STEPS``: tasks per graph (default: the run's CI length);
* ``DITRON_FUZZ_SEEDS``: how many graphs each run takes (default: the run's CI count), from
  ``DITRON_FUZZ_SEED`` (default: the run's CI seed).

For example ``DITRON_FUZZ_STEPS=12 DITRON_FUZZ_SEEDS=40 python -m pytest -q
tests/task/test_graph_fuzz.py -k fuzz_task`` (a few seconds per graph on two cores; the
graphs run ``GRAPHS_PER_LAUNCH`` to a launch). A failure names the seed; ``python -m
tests.task.test_graph_fuzz SEED WORLD_SIZE STEPS`` prints its graph, and
``ditron.launch(run_graphs, W, [draw_graph(SEED, W, STEPS)])`` replays it.

The tests after the fuzz add invalid tasks to random graphs (tiles of one task that
conflict, on one rank or across ranks; boxes outside their tensor; regions that differ
across ranks or are invalid on one rank only): every rank must raise at compile, before
any kernel runs.
"""

from __future__ import annotations

import os
import random
import re
import sys

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl
from ditron import task as dt
from ditron.kernels import tiles as library_tiles

#: kinds of task and how often each is drawn
WEIGHTS = {"affine": 5, "rowsum": 2, "allsum": 2, "matmul": 2, "mlp": 1}
#: block sizes (``tl.arange`` extents) of the elementwise tasks
BLOCKS = (1, 2, 4, 8, 16)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value else default


# -- tile functions ---------------------------------------------------------------------------
@triton.jit
def _affine_tile(tile, x, y, ctx, m0, m1, n0, n1, stride_xm, stride_xn, stride_ym, stride_yn,
                 x_shift, y_shift, alpha, beta, tiles_n, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, FLIP: tl.constexpr):
    """``y[r, c] = alpha * x[r', c] + beta`` for the tile's rows ``r`` and columns ``c`` of
    the box ``[m0, m1) x [n0, n1)``, ``r' = r`` or mirrored in the box (``FLIP``); ``x``
    on rank ``rank + x_shift``, ``y`` on rank ``rank + y_shift``."""
    rows = m0 + (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = n0 + (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m1) & (cols[None, :] < n1)
    src_rows = rows
    if FLIP:
        src_rows = m0 + m1 - 1 - rows
    x_rank = (ctx.rank + x_shift) % ctx.world_size
    y_rank = (ctx.rank + y_shift) % ctx.world_size
    v = dl.load(x + src_rows[:, None] * stride_xm + cols[None, :] * stride_xn, x_rank, ctx,
                mask=mask, other=0.0)
    dl.store(y + rows[:, None] * stride_ym + cols[None, :] * stride_yn, v * alpha + beta,
             y_rank, ctx, mask=mask)


@triton.jit
def _rowsum_tile(tile, x, y, m0, m1, N, col, stride_xm, stride_xn, stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``y[r, col] = sum_c x[r, c]`` for the tile's rows ``r`` of ``[m0, m1)``."""
    rows = m0 + tile * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for c0 in range(0, N, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < m1) & (cols[None, :] < N)
        acc += tl.sum(tl.load(x + rows[:, None] * stride_xm + cols[None, :] * stride_xn,
                              mask=mask, other=0.0), axis=1)
    tl.store(y + rows * stride_ym + col * stride_yn, acc, mask=rows < m1)


@triton.jit
def _allsum_tile(tile, x, y, ctx, m0, m1, n0, n1, stride_xm, stride_xn, stride_ym,
                 stride_yn, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``y[box] = sum over ranks q of x[box] on q`` for the tile's part of the box."""
    rows = m0 + (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = n0 + (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < m1) & (cols[None, :] < n1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for q in range(0, ctx.world_size):
        acc += dl.load(x + rows[:, None] * stride_xm + cols[None, :] * stride_xn, q, ctx,
                       mask=mask, other=0.0)
    tl.store(y + rows[:, None] * stride_ym + cols[None, :] * stride_yn, acc, mask=mask)


# -- drawing graphs (on the host; the same spec goes to every rank) ---------------------------
def _sub_range(rng: random.Random, size: int) -> tuple[int, int]:
    """A range of ``[0, size)``: mostly all of it, sometimes a part or nothing."""
    r = rng.random()
    if r < 0.55 or size == 0:
        return 0, size
    if r < 0.62:
        lo = rng.randint(0, size)
        return lo, lo
    lo = rng.randint(0, size - 1)
    return lo, rng.randint(lo + 1, size)


def _grid(lo: int, hi: int, block: int) -> int:
    return -(-(hi - lo) // block)


def _order(rng: random.Random, tiles: int, W: int) -> list[list[int]] | None:
    """A tile order per rank (a permutation; reversed or shuffled), or ``None``."""
    if rng.random() < 0.5 or tiles < 2:
        return None
    orders = []
    for _ in range(W):
        perm = list(range(tiles))
        if rng.random() < 0.3:
            perm.reverse()
        else:
            rng.shuffle(perm)
        orders.append(perm)
    return orders


def _draw_task(rng: random.Random, kind: str, tensors: list[dict], W: int) -> dict | None:
    """One task of ``kind`` over ``tensors`` (``None`` when none fits)."""
    ids = range(len(tensors))
    shape = [t["shape"] for t in tensors]
    sym = [t["sym"] for t in tensors]
    if kind == "affine":
        y = rng.choice(ids)
        same = [i for i in ids if shape[i] == shape[y]]
        x = y if rng.random() < 0.25 else rng.choice(same)
        m0, m1 = _sub_range(rng, shape[y][0])
        n0, n1 = _sub_range(rng, shape[y][1])
        shifts = [0, 0]
        if W > 1:
            for which, t in ((0, x), (1, y)):
                if sym[t] and rng.random() < 0.5:
                    shifts[which] = rng.randint(1, W - 1)
        flip = x != y and rng.random() < 0.3
        if x == y:  # in place: each tile reads and writes its own box only
            shifts[0] = shifts[1]
        bm, bn = rng.choice(BLOCKS), rng.choice(BLOCKS)
        return {"kind": kind, "x": x, "y": y, "box": (m0, m1, n0, n1), "shifts": shifts,
                "flip": flip, "block": (bm, bn), "alpha": round(rng.uniform(-1.5, 1.5), 3),
                "beta": round(rng.uniform(-1, 1), 3),
                "order": _order(rng, _grid(m0, m1, bm) * _grid(n0, n1, bn), W)}
    if kind == "rowsum":
        x = rng.choice(ids)
        ys = [i for i in ids if i != x and shape[i][1] > 0]
        if not ys:
            return None
        y = rng.choice(ys)
        m0, m1 = _sub_range(rng, min(shape[x][0], shape[y][0]))
        bm = rng.choice(BLOCKS)
        return {"kind": kind, "x": x, "y": y, "rows": (m0, m1),
                "col": rng.randrange(shape[y][1]), "block": (bm, rng.choice(BLOCKS)),
                "order": _order(rng, _grid(m0, m1, bm), W)}
    if kind == "allsum":
        xs = [i for i in ids if sym[i]]
        if not xs:
            return None
        x = rng.choice(xs)
        ys = [i for i in ids if i != x and shape[i] == shape[x]]
        if not ys:
            return None
        y = rng.choice(ys)
        m0, m1 = _sub_range(rng, shape[y][0])
        n0, n1 = _sub_range(rng, shape[y][1])
        bm, bn = rng.choice(BLOCKS), rng.choice(BLOCKS)
        return {"kind": kind, "x": x, "y": y, "box": (m0, m1, n0, n1), "block": (bm, bn),
                "order": _order(rng, _grid(m0, m1, bm) * _grid(n0, n1, bn), W)}
    if kind == "matmul":
        options = [(a, b, c) for a in ids for b in ids for c in ids
                   if c not in (a, b) and shape[a][1] == shape[b][0]
                   and shape[c] == (shape[a][0], shape[b][1])]
        if not options:
            return None
        a, b, c = rng.choice(options)
        block = (16, rng.choice((16, 32)), rng.choice((16, 32)))
        M, N = shape[c]
        return {"kind": kind, "a": a, "b": b, "c": c, "block": block,
                "order": _order(rng, library_tiles.num_tiles(M, N, *block[:2]), W)}
    if kind == "mlp":
        return _draw_mlp(rng, tensors, W)
    raise AssertionError(kind)


def _mlp_chunks(F: int, split_k: int, block_k: int) -> tuple[int, int]:
    """``(chunk, S)``: the K range of a ``down`` tile (whole K blocks) and the number of
    them, as ``add_tp_mlp`` cuts ``F`` (one chunk when ``F`` is 0)."""
    chunk = max(1, -(-F // split_k // block_k)) * block_k
    return chunk, max(1, -(-F // chunk))


def _draw_mlp(rng: random.Random, tensors: list[dict], W: int) -> dict:
    """An MLP over pool tensors where shapes allow, new ones (appended) elsewhere."""
    shape = [t["shape"] for t in tensors]
    dims = sorted({d for s in shape for d in s})
    M, H, F = (rng.choice(dims) for _ in range(3))
    bn, bk = rng.choice((16, 32)), rng.choice((16, 32))
    blocks = {"block_m": 16, "block_n": bn, "block_k": bk,
              "reduce_n": rng.choice((16, 32, 64)), "split_k": rng.choice((1, 2, 3)),
              "tma": rng.choice((None, True)), "down_n": rng.choice((None, 2 * bn))}
    S = _mlp_chunks(F, blocks["split_k"], bk)[1]
    scratch = {i for i, t in enumerate(tensors) if t.get("scratch")}

    def pick(want: tuple[int, int], sym: bool = False, avoid: tuple = (),
             reuse: set | None = None) -> int:
        pool = [i for i in range(len(tensors)) if shape[i] == want and i not in avoid
                and (not sym or tensors[i]["sym"])
                and (i in reuse if reuse is not None else i not in scratch)]
        if pool and rng.random() < 0.7:
            return rng.choice(pool)
        tensors.append({"shape": want, "sym": sym, "transposed": not sym and rng.random() < 0.2,
                        "scratch": reuse is not None})
        shape.append(want)
        return len(tensors) - 1

    x = pick((M, H))
    wg, wu, wd = pick((H, F)), pick((H, F)), pick((F, H))
    out = x if rng.random() < 0.3 else pick((M, H))
    residual = rng.choice([None, x, out, pick((M, H))])
    h = pick((M, F), avoid=(x, wg, wu, wd, out, residual), reuse=scratch)
    inbox = pick((W * S * M, H), sym=True, avoid=(x, wg, wu, wd, out, residual, h),
                 reuse=scratch)
    return {"kind": "mlp", "x": x, "w": (wg, wu, wd), "out": out, "residual": residual,
            "h": h, "inbox": inbox, "blocks": blocks, "S": S, "order": None}


def draw_graph(seed: int, world_size: int, steps: int) -> dict:
    """The spec of seed ``seed``'s graph of ``steps`` tasks for ``world_size`` ranks."""
    rng = random.Random(seed * 1000 + world_size)
    dims = [rng.choice([0, 1, 3, 5, 7, 9, 12, 16, 17, 20, 23, 31, 33])
            for _ in range(3)]
    tensors = []
    for _ in range(rng.randint(3, 6)):
        tensors.append({"shape": (rng.choice(dims), rng.choice(dims)),
                        "sym": world_size > 1 and rng.random() < 0.5,
                        "transposed": rng.random() < 0.25})
    kinds, weights = zip(*WEIGHTS.items(), strict=True)
    tasks = []
    while len(tasks) < steps:
        task = _draw_task(rng, rng.choices(kinds, weights)[0], tensors, world_size)
        if task is not None:
            tasks.append(task)
    return {"seed": seed, "world_size": world_size, "tensors": tensors, "tasks": tasks,
            "programs": rng.choice([1, 1, 2, 3, 5]), "calls": rng.choice([2, 3]),
            "warps": rng.choice([None, None, 1, 2, 8]), "trace": rng.random() < 0.3,
            "outline": rng.random() < 0.7, "twins": rng.random() < 0.25}


def describe(spec: dict) -> str:
    lines = [f"seed {spec['seed']}, {spec['world_size']} ranks, {spec['programs']} programs, "
             f"{spec['calls']} calls, warps {spec['warps']}, trace {spec['trace']}, outline "
             f"{spec['outline']}, twins {spec['twins']}"]
    for i, t in enumerate(spec["tensors"]):
        lines.append(f"  t{i}: {t['shape']}{' symmetric' if t['sym'] else ''}"
                     f"{' transposed' if t['transposed'] else ''}")
    for k, task in enumerate(spec["tasks"]):
        lines.append(f"  task {k}: {task}")
    return "\n".join(lines)


# -- running a graph on the ranks -------------------------------------------------------------
def _rect(lo: int, hi: int, block: int, index: int) -> tuple[int, int]:
    """Rows (or columns) ``index`` of a grid of ``block`` over ``[lo, hi)``."""
    start = min(lo + index * block, hi)
    return start, min(start + block, hi)


def _add_task(g: dt.TaskGraph, k: int, task: dict, ts: list[torch.Tensor], W: int) -> None:
    kind = task["kind"]
    order = task["order"]
    order_fn = None if order is None else (lambda rank, order=order: order[rank])
    if kind in ("affine", "allsum"):
        x, y = ts[task["x"]], ts[task["y"]]
        m0, m1, n0, n1 = task["box"]
        bm, bn = task["block"]
        tn = _grid(n0, n1, bn)
        count = _grid(m0, m1, bm) * tn

        def box(tile: int) -> tuple[tuple[int, int], tuple[int, int]]:
            return _rect(m0, m1, bm, tile // tn), _rect(n0, n1, bn, tile % tn)

        if kind == "affine":
            sx, sy = task["shifts"]
            flip = task["flip"]

            def reads(tile, rank):
                rows, cols = box(tile)
                if flip:
                    rows = (m0 + m1 - rows[1], m0 + m1 - rows[0])
                return dt.region(x, rows, cols, rank=(rank + sx) % W)

            g.add(f"t{k}.affine", _affine_tile, x, y, dt.CTX, m0, m1, n0, n1, *x.stride(),
                  *y.stride(), sx, sy, task["alpha"], task["beta"], max(tn, 1), bm, bn, flip,
                  tiles=count, reads=reads, order=order_fn,
                  writes=lambda tile, rank: dt.region(y, *box(tile), rank=(rank + sy) % W))
        else:
            g.add(f"t{k}.allsum", _allsum_tile, x, y, dt.CTX, m0, m1, n0, n1, *x.stride(),
                  *y.stride(), max(tn, 1), bm, bn, tiles=count, order=order_fn,
                  reads=lambda tile, rank: [dt.region(x, *box(tile), rank=q) for q in range(W)],
                  writes=lambda tile, rank: [dt.region(y, *box(tile))])
    elif kind == "rowsum":
        x, y = ts[task["x"]], ts[task["y"]]
        m0, m1 = task["rows"]
        bm, bn = task["block"]
        col = task["col"]
        g.add(f"t{k}.rowsum", _rowsum_tile, x, y, m0, m1, x.shape[1], col, *x.stride(),
              *y.stride(), bm, bn, tiles=_grid(m0, m1, bm), order=order_fn,
              reads=lambda tile, rank: dt.region(x, _rect(m0, m1, bm, tile)),
              writes=lambda tile, rank: dt.region(y, _rect(m0, m1, bm, tile), col))
    elif kind == "mlp":
        from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

        residual = None if task["residual"] is None else ts[task["residual"]]
        add_tp_mlp(g, ts[task["x"]], *(ts[i] for i in task["w"]), ts[task["out"]],
                   residual=residual, h=ts[task["h"]], inbox=ts[task["inbox"]],
                   blocks=MlpBlocks(**task["blocks"]), name=f"t{k}.mlp")
    else:
        a, b, c = ts[task["a"]], ts[task["b"]], ts[task["c"]]
        bm, bn, bk = task["block"]
        M, N = c.shape
        K = a.shape[1]

        def mm_box(tile):
            return library_tiles.tile_box(tile, M, N, bm, bn)

        g.add(f"t{k}.matmul", library_tiles.matmul_tile, a, b, c, M, N, K, *a.stride(),
              *b.stride(), *c.stride(), bm, bn, bk, "ieee", True,
              tiles=library_tiles.num_tiles(M, N, bm, bn), order=order_fn,
              reads=lambda tile, rank: [dt.region(a, mm_box(tile)[0]),
                                        dt.region(b, (0, K), mm_box(tile)[1])],
              writes=lambda tile, rank: dt.region(c, *mm_box(tile)))


def _inputs(spec: dict, call: int) -> list[list[torch.Tensor]]:
    """Every tensor's value on every rank at the start of call ``call`` (float32)."""
    g = torch.Generator().manual_seed(spec["seed"] * 7919 + call)
    return [[torch.randn(t["shape"], generator=g) for _ in range(spec["world_size"])]
            for t in spec["tensors"]]


def reference(spec: dict, start: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """Every tensor on every rank after the graph, in float64, task by task."""
    W = spec["world_size"]
    state = [[v.double().clone() for v in per_rank] for per_rank in start]
    for task in spec["tasks"]:
        kind = task["kind"]
        writes = []  # (tensor, rank, index, value), from the state before the task
        if kind == "affine":
            m0, m1, n0, n1 = task["box"]
            sx, sy = task["shifts"]
            for r in range(W):
                v = state[task["x"]][(r + sx) % W][m0:m1, n0:n1]
                if task["flip"]:
                    v = v.flip(0)
                writes.append((task["y"], (r + sy) % W, (slice(m0, m1), slice(n0, n1)),
                               task["alpha"] * v + task["beta"]))
        elif kind == "allsum":
            m0, m1, n0, n1 = task["box"]
            total = sum(state[task["x"]][q][m0:m1, n0:n1] for q in range(W))
            for r in range(W):
                writes.append((task["y"], r, (slice(m0, m1), slice(n0, n1)), total))
        elif kind == "rowsum":
            m0, m1 = task["rows"]
            for r in range(W):
                writes.append((task["y"], r, (slice(m0, m1), task["col"]),
                               state[task["x"]][r][m0:m1].sum(1)))
        elif kind == "mlp":
            _mlp_reference(task, state, W)
        else:
            for r in range(W):
                writes.append((task["c"], r, (slice(None), slice(None)),
                               state[task["a"]][r] @ state[task["b"]][r]))
        for t, r, index, value in writes:
            state[t][r][index] = value
    return state


def _mlp_reference(task: dict, state: list[list[torch.Tensor]], W: int) -> None:
    """The MLP's three tasks, one after the other, on every rank's copies."""
    wg, wu, wd = task["w"]
    h, inbox, S = task["h"], task["inbox"], task["S"]
    M, F = state[h][0].shape
    chunk = _mlp_chunks(F, task["blocks"]["split_k"], task["blocks"]["block_k"])[0]
    for r in range(W):  # up
        x = state[task["x"]][r]
        state[h][r] = torch.nn.functional.silu(x @ state[wg][r]) * (x @ state[wu][r])
    for r in range(W):  # down: every rank's partials into every rank's inbox
        for kc in range(S):
            k0, k1 = kc * chunk, min(F, (kc + 1) * chunk)
            part = state[h][r][:, k0:k1] @ state[wd][r][k0:k1]
            for q in range(W):
                state[inbox][q][(r * S + kc) * M:(r * S + kc + 1) * M] = part
    for r in range(W):  # reduce
        total = state[inbox][r].reshape(W * S, M, state[inbox][r].shape[1]).sum(0)
        if task["residual"] is not None:
            total = total + state[task["residual"]][r]
        state[task["out"]][r] = total


def _check_trace(mk, n_items: int) -> str | None:
    """Every item once in the trace; no item's waits end before a local item it waits for
    finished its tile. The tile-done stamp is taken before the item notifies, its end stamp
    after (a waiter may see the notification first); the GPU's global timer and the CPU
    backend's logical clock both order the stamp before the notification."""
    rows = mk.last_trace
    items = sorted(row[0] for row in rows)
    if items != list(range(n_items)):
        return f"trace lists items {items}"
    s = mk.schedule
    by_item = {row[0]: row for row in rows}
    for item, row in by_item.items():
        for slot in s.waits(item):
            rank, dep = s.setter(slot)
            if rank == s.rank and dep is not None and by_item[dep][4] > row[3]:
                return (f"item {item}'s waits ended before item {dep}, which it waits for, "
                        f"finished its tile (stamps {row[3]} < {by_item[dep][4]})")
    return None


def run_graphs(specs: list[dict]) -> list[str]:
    """Build, compile and call each graph of ``specs`` on this rank; the failures. Every rank
    makes every call even after a wrong one (a rank stopping early would leave its peers
    waiting for it)."""
    w = ditron.world()
    me, W = w.rank, w.world_size
    wrong = []
    for spec in specs:
        assert spec["world_size"] == W
        ts, held = [], []
        for i, t in enumerate(spec["tensors"]):
            rows, cols = t["shape"]
            alloc_shape = (cols, rows) if t["transposed"] else (rows, cols)
            if t["sym"]:
                buf = ditron.empty(alloc_shape, torch.float32, name=f"fuzz{spec['seed']}.t{i}")
                held.append(buf)
            else:
                buf = torch.empty(alloc_shape, device=w.device)
            ts.append(buf.t() if t["transposed"] else buf)
        g = dt.TaskGraph(f"fuzz{spec['seed']}")
        for k, task in enumerate(spec["tasks"]):
            _add_task(g, k, task, ts, W)
        kernels = [g.compile(programs=spec["programs"], num_warps=spec["warps"],
                             trace=spec["trace"], outline=spec["outline"])
                   for _ in range(2 if spec["twins"] else 1)]
        for call in range(spec["calls"]):
            start = _inputs(spec, call)
            for t, values in zip(ts, start, strict=True):
                t.copy_(values[me])
            mk = kernels[call % len(kernels)]  # twins: two scoreboards, calls alternate
            mk()
            expected = reference(spec, start)
            for i, (t, ref) in enumerate(zip(ts, expected, strict=True)):
                got, want = t.double().cpu(), ref[me]
                err = (got - want).abs().max().item() if want.numel() else 0.0
                scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
                if not err <= 1e-5 * scale:  # NaN fails too
                    wrong.append(f"seed {spec['seed']} call {call} rank {me}: t{i} off by "
                                 f"{err:.3g} (scale {scale:.3g})")
            if spec["trace"] and (problem := _check_trace(mk, mk.schedule.n_items)):
                wrong.append(f"seed {spec['seed']} call {call} rank {me}: {problem}")
        for mk in kernels:
            mk.free()
        for buf in held:  # after this rank's last call no peer touches its copies
            ditron.free(buf)
    return wrong


# -- tests ------------------------------------------------------------------------------------
#: graphs run in one launch (each launch must end within ``DITRON_LAUNCH_TIMEOUT``)
GRAPHS_PER_LAUNCH = 4
#: CI's runs: (world size, tasks per graph, graphs, first seed)
CI_RUNS = [(1, 6, 4, 0), (2, 6, 4, 0), (3, 5, 3, 0)]


@pytest.mark.parametrize("world_size,steps,graphs,seed", CI_RUNS,
                         ids=[f"W{w}-{n}tasks-{g}graphs" for w, n, g, _ in CI_RUNS])
def test_fuzz_task_graphs(world_size, steps, graphs, seed, backend):
    steps = _env_int("DITRON_FUZZ_STEPS", steps)
    first = _env_int("DITRON_FUZZ_SEED", seed)
    count = _env_int("DITRON_FUZZ_SEEDS", graphs)
    specs = [draw_graph(s, world_size, steps) for s in range(first, first + count)]
    failures = []
    for i in range(0, len(specs), GRAPHS_PER_LAUNCH):  # a long hunt: in several launches
        got = ditron.launch(run_graphs, world_size, specs[i:i + GRAPHS_PER_LAUNCH],
                            backend=backend)
        failures += [f for per_rank in got for f in per_rank]
    if failures:
        seeds = sorted({int(f.split()[1]) for f in failures})
        shown = "\n".join(describe(s) for s in specs if s["seed"] in seeds[:1])
        pytest.fail("\n".join(failures[:8]) + "\n" + shown)


#: invalid tasks added to a random graph, and the error every rank must raise at compile
INVALID = {
    "clash": r"task 'bad': tile 0 on rank 0 and tile 1 on rank 0 access an overlapping box "
             r"of one tensor on rank 0 and one of them writes it; tiles of a task must be "
             r"independent",
    "clash_ranks": r"task 'bad': tile 0 on rank 0 and tile 0 on rank 1 access an overlapping "
                   r"box of one tensor on rank 0",
    "outside": r"Region: range \(4, 9\) of dimension 0 is outside the tensor's shape \(6, 5\)",
    "past_end": r"region: range \(7, 9\) is not within dimension 0 of size 6",
    "differs": r"ranks 0 and 1 derive different dependencies between them",
    "one_rank": r"(a rank refused the call's arguments:\n  rank \d: ValueError: )?task 'bad': "
                r"tile 0 on rank 0 and tile 1 on rank 0 access an overlapping box",
}


def _add_invalid(g: dt.TaskGraph, how: str, y: torch.Tensor, me: int, W: int) -> None:
    """A task "bad" of two tiles over ``y`` (6 x 5) that is invalid as ``how`` says, and a
    task after it that reads all of ``y``."""
    writes = {
        "clash": lambda t, r: dt.region(y, (t, 6)),
        "clash_ranks": lambda t, r: dt.region(y, (3 * t, 3 * t + 3), rank=0),
        "outside": lambda t, r: dt.Region(y, ((4, 9), (0, 5))),
        "past_end": lambda t, r: dt.region(y, (7, 9)),
        # rank 0 says every rank pushes to its right neighbour, the others that every rank
        # writes its own copy (computed from the rank running the code, not from ``r``)
        "differs": lambda t, r: dt.region(y, (3 * t, 3 * t + 3),
                                          rank=(r + 1) % W if me == 0 else r),
        "one_rank": lambda t, r: dt.region(y, (t, 6) if me == W - 1 else (3 * t, 3 * t + 3)),
    }[how]
    g.add("bad", _affine_tile, y, y, dt.CTX, 0, 6, 0, 5, *y.stride(), *y.stride(), 0, 0, 1.0,
          0.0, 1, 4, 8, False, tiles=2, writes=writes)
    g.add("after", _affine_tile, y, y, dt.CTX, 0, 6, 0, 5, *y.stride(), *y.stride(), 0, 0,
          1.0, 0.0, 1, 8, 8, False, tiles=1, reads=lambda t, r: dt.region(y))


def _invalid_case(specs: list[dict], how: str) -> list[str]:
    """Each random graph of ``specs`` with an invalid task added (``INVALID``) on its
    extra tensor ``(6, 5)``: the compile's error on this rank, per graph."""
    w = ditron.world()
    me, W = w.rank, w.world_size
    got = []
    for spec in specs:
        ts, held = [], []
        for t in spec["tensors"]:
            rows, cols = t["shape"]
            if t["sym"]:
                held.append(ditron.empty((cols, rows) if t["transposed"] else (rows, cols)))
                ts.append(held[-1].t() if t["transposed"] else held[-1])
            else:
                ts.append(torch.empty((rows, cols), device=w.device))
        g = dt.TaskGraph(f"invalid{spec['seed']}")
        for k, task in enumerate(spec["tasks"]):
            _add_task(g, k, task, ts, W)
        _add_invalid(g, how, ts[-1], me, W)
        try:
            g.compile()
            got.append("compiled")
        except (ValueError, TypeError) as exc:
            got.append(str(exc))
        for buf in held:
            ditron.free(buf)
    return got


@pytest.mark.parametrize("how", sorted(INVALID))
def test_invalid_graphs_raise_on_every_rank(how, backend, monkeypatch):
    """Random graphs with one invalid task: every rank raises at compile, before any
    kernel runs, naming the problem (rank ``W - 1``'s own problem, on the others that it
    failed there); no rank is left waiting for another."""
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    world_sizes = [2, 3] if how in ("clash_ranks", "differs", "one_rank") else [1, 2]
    for W in world_sizes:
        specs = [draw_graph(s, W, 3) for s in range(2)]
        for spec in specs:
            spec["tensors"].append({"shape": (6, 5), "sym": W > 1, "transposed": False})
        got = ditron.launch(_invalid_case, W, specs, how, backend=backend)
        for r, per_graph in enumerate(got):
            for msg in per_graph:
                assert re.search(INVALID[how], msg), (W, r, msg)


if __name__ == "__main__":  # print a seed's graph: SEED WORLD_SIZE STEPS
    print(describe(draw_graph(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
