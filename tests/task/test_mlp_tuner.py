"""The MLP tuner on 1-4 ranks: ranks agree, the choice is cached and ``add_tp_mlp`` builds
with it (then matches torch), failing candidates drop out, bad shapes are refused."""

from __future__ import annotations

import os

import pytest
import torch

import ditron

from .test_megakernel import _mlp_case


def _tune_case(cache_dir: str, M: int, H: int, F: int) -> tuple:
    from ditron import task as dt
    from ditron.kernels import tiles
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp, tuned_blocks
    from ditron.task.tp_mlp_tuner import tune_mlp

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    W = ditron.world().world_size
    dev = ditron.world().device
    # laid out as nn.Linear keeps them, as tune_mlp times them by default
    wg, wd = torch.zeros(F, H, device=dev).t(), torch.zeros(H, F, device=dev).t()
    # untuned: the default for the rows, here 128-row tiles that ask for 8 warps
    x = torch.zeros(100, H, device=dev)
    g = dt.TaskGraph("untuned")
    add_tp_mlp(g, x, wg, wg, wd, torch.empty_like(x))
    assert [t.warps for t in g.tasks] == [8, 8, 8] and g.num_warps() == 8
    assert g.tasks[0].tiles == tiles.num_tiles(100, F, 128, 128)
    # the first candidate cannot be built (block_m < 16): it drops out on every rank
    configs = [MlpBlocks(8, 16, 16, 32, 1), MlpBlocks(16, 16, 16, 32, 1),
               MlpBlocks(16, 32, 16, 32, 2), MlpBlocks(16, 16, 32, 32, 2, stages=2)]
    assert tuned_blocks(M, H, F, torch.float32, W) is None
    heap = ditron.runtime.world.current().heap
    ditron.barrier()  # its own pad, made on first use, stays
    used = heap.used_bytes
    # no warm-up calls: each candidate's first call (its compile) came before the timing,
    # and the rounds still call every candidate more than once, in rotating orders
    chosen = tune_mlp(M, H, F * W, torch.float32, configs=configs, warmup=0, iters=2,
                      progress=False)
    # the candidates' inboxes and megakernels' scoreboards are freed (the scoreboards were
    # not: each tune leaked one per candidate)
    assert heap.used_bytes == used
    assert chosen in configs[1:]
    assert tuned_blocks(M, H, F, torch.float32, W) == chosen
    # the next MLP built without blocks takes the tuned tiles, and still matches torch
    x = torch.zeros(M, H, device=dev)
    g = dt.TaskGraph("probe")
    add_tp_mlp(g, x, wg, wg, wd, torch.empty_like(x))
    assert g.tasks[0].tiles == tiles.num_tiles(M, F, chosen.block_m, chosen.block_n)
    checks = _mlp_case(M, H, F, 2, torch.float32, 2, None)
    return chosen, checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_tuned_blocks_are_agreed_cached_and_used(world_size, backend, tmp_path):
    res = ditron.launch(_tune_case, world_size, str(tmp_path), 20, 24, 40, backend=backend)
    assert all(r == res[0] for r in res) and res[0][1] == 2


def _refusals() -> list[str]:
    from ditron.task.tp_mlp import MlpBlocks
    from ditron.task.tp_mlp_tuner import tune_mlp

    messages = []
    for args, kwargs in (((8, 16, 15), {}), ((0, 16, 16), {}),
                         ((8, 16, 16), {"configs": []}),
                         ((8, 16, 16), {"configs": [MlpBlocks(8)]}),
                         ((16.0, 16, 16), {})):  # failed inside torch.randn
        with pytest.raises((ValueError, RuntimeError)) as info:
            tune_mlp(*args, torch.float32, progress=False, save=False, **kwargs)
        messages.append(str(info.value))
    return messages


def test_tune_mlp_refuses_bad_shapes(backend):
    messages = ditron.launch(_refusals, 2, backend=backend)[0]
    assert "does not divide by the world size 2" in messages[0]
    assert "tune_mlp: tokens must be a positive int, got 0" in messages[1]
    assert "no candidate" in messages[2]
    assert "every candidate failed" in messages[3] and "block_m" in messages[3]
    assert "tune_mlp: tokens must be a positive int, got 16.0" in messages[4]


def test_gpu_candidates_cover_the_tokens_and_fit(monkeypatch):
    from ditron.task import tp_mlp_tuner
    from ditron.task.tp_mlp import MlpBlocks, default_blocks

    class Props:  # an H200's shared memory per block
        shared_memory_per_block_optin = 232448

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    cuda = torch.device("cuda")
    decode = tp_mlp_tuner.candidates(16, 4096, 5504, torch.bfloat16, cuda)
    assert decode[0] == MlpBlocks() == default_blocks(16)
    assert {b.block_m for b in decode} == {16} and {b.warps for b in decode} == {None}
    # narrow, deep tiles for small layers: 16 x 64 x 256 fits 3 stages, not 4
    assert MlpBlocks(16, 64, 256, 256, 4) in decode
    assert MlpBlocks(16, 64, 256, 256, 4, 4) not in decode
    prefill = tp_mlp_tuner.candidates(64, 4096, 5504, torch.bfloat16, cuda)
    assert prefill[0] == default_blocks(64) == MlpBlocks(64, 128, 64, 256, 4, 4)
    assert {b.block_m for b in prefill} == {32, 64}  # covering the tokens, and half
    # 64 rows x 128 x 128 at 3 stages needs 240 KiB: left out; in fp32 fewer still fit
    assert not [b for b in prefill if (b.block_m, b.block_n, b.block_k) == (64, 128, 128)]
    wide = tp_mlp_tuner.candidates(64, 4096, 5504, torch.float32, cuda)
    assert 0 < len(wide) < len(prefill)
    assert wide[0] == default_blocks(64, torch.float32, 232448) == MlpBlocks(64, 128, 32, 256, 4, 4)
    batch = tp_mlp_tuner.candidates(100, 4096, 5504, torch.bfloat16, cuda)
    assert batch[0] == default_blocks(100) == MlpBlocks(128, 128, 64, 256, 4, 4, warps=8)
    assert {b.block_m for b in batch} == {64, 128}
    # 128 x 128 needs 8 warps for its two accumulators; 8 warps only from 64 rows on
    assert MlpBlocks(128, 128, 64, 256, 4, 4) not in batch
    assert MlpBlocks(64, 128, 64, 256, 4, 4, warps=8) in batch
    assert {b.warps for b in prefill} == {b.warps for b in batch} == {None, 8}
    for configs, size in ((decode, 2), (prefill, 2), (wide, 4), (batch, 2)):
        assert len(set(configs)) == len(configs)
        for b in configs:
            depth = b.stages or 3
            assert depth * (b.block_m * b.block_k + 2 * b.block_k * b.block_n) * size <= 232448
            assert b.smem_bytes(size) <= 232448
            assert 2 * b.block_m * b.block_n <= tp_mlp_tuner.ACC_REGS * 32 * (b.warps or 4)
            assert b.warps is None or b.block_m >= tp_mlp_tuner.WIDE_ROWS
    # from 64 rows, the default tiles with 256-column down tiles at every split
    assert [b for b in batch if b.down_n] == [
        MlpBlocks(128, 128, 64, 256, s, 4, warps=8, down_n=256) for s in (4, 2, 8)]
    assert not [b for b in decode if b.down_n]
    # deeper pipelines too, with the tiles that fit them: 64 x 128 x 64 at 4 stages
    assert {b.stages for b in prefill} == {None, 4}
    assert not [b for b in prefill if b.stages == 4 and (b.block_n, b.block_k) == (128, 128)]


def test_default_blocks_follow_the_tokens_and_fit_shared_memory():
    from ditron.task.tp_mlp import MlpBlocks, default_blocks

    h200, a100 = 232448, 166912
    assert [default_blocks(t).label() for t in (1, 16, 17, 32, 33, 64, 65, 128, 4096)] == [
        "16x128x128x256x4", "16x128x128x256x4", "32x128x128x256x4", "32x128x128x256x4",
        "64x128x64x256x4s4", "64x128x64x256x4s4", "128x128x64x256x4s4w8",
        "128x128x64x256x4s4w8", "128x128x64x256x4s4w8"]
    assert default_blocks(16, torch.bfloat16, h200) == MlpBlocks()
    # less shared memory, or 4-byte elements: block_k halved until the stages fit
    assert default_blocks(16, torch.bfloat16, a100) == MlpBlocks(block_k=64)
    assert default_blocks(16, torch.float32, h200) == MlpBlocks(block_k=64)
    assert default_blocks(128, torch.float32, a100).block_k == 16
    for t in (16, 32, 64, 128):
        for dtype in (torch.bfloat16, torch.float32):
            for smem in (h200, a100):
                assert default_blocks(t, dtype, smem).smem_bytes(dtype.itemsize) <= smem
    assert default_blocks(16, torch.float32) == MlpBlocks()  # no limit given (CPU)


def test_blocks_labels_round_trip():
    from ditron.task.tp_mlp import MlpBlocks

    for blocks in (MlpBlocks(), MlpBlocks(64, 128, 64, 256, 8, stages=4),
                   MlpBlocks(32, 64, 32, 128, 1, stages=2), MlpBlocks(128, warps=8),
                   MlpBlocks(128, 128, 64, 256, 4, stages=4, warps=8),
                   MlpBlocks(16, tma=False), MlpBlocks(128, 128, 64, 256, 2, 4, 8, tma=True),
                   MlpBlocks(128, 128, 64, 256, 4, 4, 8, down_n=256),
                   MlpBlocks(64, 64, 64, 256, 4, tma=True, down_n=128)):
        assert MlpBlocks.parse(blocks.label()) == blocks
    assert MlpBlocks.parse("16x128x128x256") == MlpBlocks()
    assert MlpBlocks.parse("64x128x64x256x4s4").stages == 4
    assert MlpBlocks(128, 128, 64, 256, 4, 4, 8).label() == "128x128x64x256x4s4w8"
    assert MlpBlocks.parse("16x128x128x256x4t1").tma is True
    assert MlpBlocks.parse("128x128x64x256x4s4w8t1d256").down_n == 256
    # a 256-column down tile stages what a SwiGLU tile of 2 x 128 columns does, more than
    # the SwiGLU tile of 2 x 64 beside it
    wide = MlpBlocks(16, 64, 64, 256, down_n=256).smem_bytes(2)
    assert wide == MlpBlocks(16, 128, 64, 256).smem_bytes(2) > MlpBlocks(16, 64, 64).smem_bytes(2)
    for bad in ("16x128", "16x128x128x256x4s", "16x128x128x256x4x3", "big",
                "16x128x128x256x4w8s4", "16x128x128x256x4t2", "16x128x128x256x4t1w8",
                "16x128x128x256x4d256t1"):
        with pytest.raises(ValueError, match="is not BMxBNxBKxRN"):
            MlpBlocks.parse(bad)


def _bad_blocks() -> list[str]:
    from ditron import task as dt
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp, add_tp_mlp_stack

    dev = ditron.world().device
    x = torch.zeros(8, 16, device=dev)
    w = torch.zeros(16, 16, device=dev)
    messages = []
    for blocks in (MlpBlocks(block_m=8), MlpBlocks(block_n=96), MlpBlocks(block_k=8),
                   MlpBlocks(reduce_n=100), MlpBlocks(split_k=0), MlpBlocks(stages=0),
                   MlpBlocks(warps=6), MlpBlocks(down_n=48), MlpBlocks(block_m=16.0),
                   MlpBlocks(split_k=True)):
        graph = dt.TaskGraph("bad")
        with pytest.raises(ValueError) as info:
            add_tp_mlp(graph, x, w, w, w, torch.empty_like(x), blocks=blocks)
        assert not graph.tasks  # refused before any task was added
        messages.append(str(info.value))
    with pytest.raises(ValueError) as info:
        add_tp_mlp_stack(dt.TaskGraph("empty"), x, [])
    messages.append(str(info.value))
    return messages


def test_add_tp_mlp_refuses_bad_tiles_and_empty_stacks(backend):
    wanted = ("block_m must be a power of two >= 16 (tl.dot), got 8",
              "block_n must be a power of two >= 16 (tl.dot), got 96",
              "block_k must be a power of two >= 16 (tl.dot), got 8",
              "reduce_n must be a power of two >= 1, got 100",
              "split_k must be a positive int, got 0", "stages must be a positive int, got 0",
              "warps must be None or one of (1, 2, 4, 8, 16, 32), got 6",
              "down_n must be a power of two >= 16 (tl.dot), got 48",
              "block_m must be a power of two >= 16 (tl.dot), got 16.0",
              "split_k must be a positive int, got True",
              "add_tp_mlp_stack: no layers")
    messages = ditron.launch(_bad_blocks, 1, backend=backend)[0]
    assert len(messages) == len(wanted)
    for message, want in zip(messages, wanted, strict=True):
        assert want in message


def _rank0_cache_case(cache_root: str) -> int:
    """Blocks tuned into rank 0's cache only (each rank has its own folder): every rank
    builds the MLP with them (rank 0's cache decides), so the compile agrees."""
    import dataclasses

    from ditron import task as dt
    from ditron.task.tp_mlp import TUNED_OP, MlpBlocks, add_tp_mlp
    from ditron.tune import cache
    from ditron.tune.decisions import key_for

    me, W = ditron.world().rank, ditron.world().world_size
    os.environ["DITRON_CACHE_DIR"] = os.path.join(cache_root, f"rank{me}")
    M, H, F = 20, 24, 16
    tuned = MlpBlocks(16, 16, 16, 32, 2)
    if me == 0:
        cache.put(key_for(TUNED_OP, M, H, F, torch.float32, W),
                  {"blocks": dataclasses.asdict(tuned)})
    dev = ditron.world().device
    x = torch.randn(M, H, device=dev)
    wg, wd = torch.randn(F, H, device=dev).t(), torch.randn(H, F, device=dev).t()
    g = dt.TaskGraph("rank0_cache")
    add_tp_mlp(g, x, wg, wg, wd, torch.empty_like(x))
    g.compile()  # agrees the tasks' tiles across ranks
    return g.tasks[0].tiles


@pytest.mark.parametrize("world_size", [2, 3])
def test_rank0_cached_blocks_are_used_on_every_rank(world_size, backend, tmp_path):
    from ditron.kernels import tiles

    res = ditron.launch(_rank0_cache_case, world_size, str(tmp_path), backend=backend)
    assert res == [tiles.num_tiles(20, 16, 16, 16)] * world_size


def _damaged_entries_case(cache_dir: str) -> list[int]:
    """Cache entries of tiles ``add_tp_mlp`` refuses (hand-edited, another version's) read
    as none: the MLP takes the default tiles instead of raising."""
    from ditron import task as dt
    from ditron.task.tp_mlp import TUNED_OP, add_tp_mlp, tuned_blocks
    from ditron.tune import cache
    from ditron.tune.decisions import key_for

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    W = ditron.world().world_size
    M, H, F = 20, 24, 16
    x, wg, wd = torch.randn(M, H), torch.randn(F, H).t(), torch.randn(H, F).t()
    got = []
    for blocks in ({"block_m": 8}, {"block_n": 96}, {"split_k": 0}, {"block_m": "16"},
                   {"tma": "0"}, {"warps": 6}):
        if ditron.world().rank == 0:
            cache.put(key_for(TUNED_OP, M, H, F, torch.float32, W), {"blocks": blocks})
            assert tuned_blocks(M, H, F, torch.float32, W) is None
        g = dt.TaskGraph("damaged")
        add_tp_mlp(g, x, wg, wg, wd, torch.empty_like(x))
        got.append(g.tasks[0].tiles)
    return got


def test_damaged_cached_blocks_fall_back_to_the_default(backend, tmp_path):
    from ditron.kernels import tiles
    from ditron.task.tp_mlp import default_blocks

    # every add_tp_mlp of these shapes raised (block_m must be a power of two ...) until
    # the entry was tuned again by hand
    got = ditron.launch(_damaged_entries_case, 2, str(tmp_path), backend=backend)
    default = default_blocks(20)
    assert got == [[tiles.num_tiles(20, 16, default.block_m, default.block_n)] * 6] * 2


def _failed_write_case(cache_root: str) -> str:
    from ditron.task.tp_mlp import MlpBlocks
    from ditron.task.tp_mlp_tuner import tune_mlp

    me = ditron.world().rank
    os.environ["DITRON_CACHE_DIR"] = path = os.path.join(cache_root, f"rank{me}")
    if me == 0:  # its cache file cannot be read, so it is not replaced: the write fails
        os.makedirs(os.path.join(path, "tune.json"))
    with pytest.raises((RuntimeError, OSError)) as info:
        tune_mlp(4, 16, 32, torch.float32, layers=1, configs=[MlpBlocks(16, 16, 16, 16, 1)],
                 warmup=0, iters=1, progress=False)
    return f"{type(info.value).__name__}: {info.value}"


def test_a_failed_cache_write_raises_on_every_rank(backend, tmp_path, monkeypatch):
    # rank 0 raised CacheError alone while the others waited in a barrier, for ever
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_failed_write_case, 2, str(tmp_path), backend=backend)
    assert got[0].startswith("CacheError: cannot write the tuning cache"), got[0]
    assert got[1].startswith("RuntimeError: tune_mlp: caching the choice: rank 0 failed to "
                             "decide for every rank: CacheError: cannot write"), got[1]


def _timing_fails_case(cache_dir: str) -> tuple:
    """Timing raises on every rank (a wait timeout, a device error): each rank raises,
    and the candidates' inboxes and scoreboards are freed (they stayed allocated, so a
    caller that caught the error and tuned again filled the heap)."""
    from ditron.task import tp_mlp_tuner
    from ditron.task.tp_mlp import MlpBlocks

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    W = ditron.world().world_size
    heap = ditron.runtime.world.current().heap
    ditron.barrier()  # its own pad, made on first use, stays
    used = heap.used_bytes
    configs = [MlpBlocks(16, 16, 16, 32, 1), MlpBlocks(16, 32, 16, 32, 2)]
    real = tp_mlp_tuner.time_in_rounds

    def failing(*args, **kwargs):
        raise RuntimeError("timing failed here")

    tp_mlp_tuner.time_in_rounds = failing
    try:
        with pytest.raises(RuntimeError, match="timing failed here"):
            tp_mlp_tuner.tune_mlp(20, 24, 16 * W, torch.float32, layers=1, configs=configs,
                                  warmup=0, iters=1, progress=False)
    finally:
        tp_mlp_tuner.time_in_rounds = real
    after_failure = heap.used_bytes
    chosen = tp_mlp_tuner.tune_mlp(20, 24, 16 * W, torch.float32, layers=1, configs=configs,
                                   warmup=0, iters=1, progress=False)
    return after_failure - used, heap.used_bytes - used, chosen in configs


def test_a_failed_timing_frees_the_candidates(backend, tmp_path):
    got = ditron.launch(_timing_fails_case, 2, str(tmp_path), backend=backend)
    assert got == [(0, 0, True)] * 2
