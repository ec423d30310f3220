"""Tuned MLP tiles are kept per layout of the weights: ``tune_mlp`` timed ``nn.Linear``'s
``.t()`` only, and ``add_tp_mlp`` took that choice for row-major weights too (the tiles'
speeds depend on which dimension of a weight is contiguous)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.nn.functional as F_

import ditron


def _layouts_case(cache_dir: str) -> list:
    from ditron import task as dt
    from ditron.kernels import tiles
    from ditron.task import tp_mlp
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp, add_tp_mlp_stack, tuned_blocks
    from ditron.task.tp_mlp_tuner import tune_mlp
    from ditron.tune import cache
    from ditron.tune.decisions import key_for

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    W = ditron.world().world_size
    M, H, F = 20, 24, 32
    row_major, transposed = MlpBlocks(16, 16, 16, 32, 1), MlpBlocks(16, 32, 16, 32, 2)
    with pytest.raises(ValueError, match="layout must be one of t, n"):
        tune_mlp(M, H, F * W, torch.float32, layers=1, configs=[row_major], layout="strided",
                 progress=False)
    chosen = tune_mlp(M, H, F * W, torch.float32, layers=1, configs=[row_major], warmup=0,
                      iters=1, progress=False, layout="n")
    assert chosen == row_major
    assert tuned_blocks(M, H, F, torch.float32, W, "n") == row_major
    assert tuned_blocks(M, H, F, torch.float32, W) is None  # nothing tuned for .t() yet
    ditron.barrier()  # every rank has looked before rank 0 writes
    if ditron.world().rank == 0:
        cache.put(key_for(tp_mlp.TUNED_OP, M, H, F, torch.float32, W, "t"),
                  {"blocks": dataclasses.asdict(transposed)})
    ditron.barrier()
    g = torch.Generator().manual_seed(3)  # the same on every rank: all_reduce = W x
    x = torch.randn(M, H, generator=g)
    wg, wu, wd = (torch.randn(k, n, generator=g) / k ** 0.5 for k, n in ((H, F), (H, F), (F, H)))

    def tiles_of(*weights) -> int:
        graph = dt.TaskGraph("probe")
        add_tp_mlp(graph, x, *weights, torch.empty_like(x))
        return graph.tasks[0].tiles

    with pytest.raises(ValueError, match="layout must be None or one of t, n, strided"):
        add_tp_mlp(dt.TaskGraph("bad"), x, wg, wu, wd, torch.empty_like(x), layout="nk")
    seen = [tiles_of(wg, wu, wd),  # row-major: the choice tuned so
            tiles_of(*(w.t().contiguous().t() for w in (wg, wu, wd))),  # nn.Linear's .t()
            tiles_of(wg, wu.t().contiguous().t(), wd)]  # a mix: never tuned
    want = [tiles.num_tiles(M, F, b.block_m, b.block_n)
            for b in (row_major, transposed, tp_mlp.default_blocks(M))]
    # a stack of layers laid out differently shares one inbox: every layer takes the same
    # tiles (the default: a mix is never tuned), so the stack builds and computes
    graph = dt.TaskGraph("mixed")
    layers = [(wg, wu, wd), tuple(w.t().contiguous().t() for w in (wg, wu, wd))]
    stack = add_tp_mlp_stack(graph, x.clone(), layers)
    assert [t.tiles for t in graph.tasks if t.name.endswith(".up")] == [want[2]] * 2
    graph.compile()()
    ref = x
    for a, b, c in layers:
        ref = ref + W * ((F_.silu(ref @ a) * (ref @ b)) @ c)
    return seen == want, torch.allclose(stack.out, ref, rtol=1e-4, atol=1e-4)


def test_tuned_tiles_are_kept_per_weight_layout(backend, tmp_path):
    got = ditron.launch(_layouts_case, 2, str(tmp_path), backend=backend)
    assert got == [(True, True)] * 2
