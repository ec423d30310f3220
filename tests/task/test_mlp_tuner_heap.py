"""The MLP tuner's candidates share one inbox: each holding its own, a heap with room for
the largest but not for all of them at once made the candidates built after it filled
drop out ("symmetric heap exhausted"), so the choice depended on the heap's size."""

from __future__ import annotations

import os

import torch

import ditron


def _tight_heap_case(cache_dir: str) -> tuple:
    from ditron.runtime.world import current
    from ditron.task import tp_mlp_tuner
    from ditron.task.tp_mlp import MlpBlocks, inbox_shape

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    W = ditron.world().world_size
    M, H, F = 16, 64, 64
    configs = [MlpBlocks(16, 16, 16, 32, 1), MlpBlocks(16, 16, 16, 32, 4),
               MlpBlocks(16, 32, 16, 32, 4)]
    sizes = [inbox_shape(M, H, F, W, b)[0] * H * 4 for b in configs]
    assert sizes == [W * 16 * H * 4, W * 64 * H * 4, W * 64 * H * 4]
    heap = current().heap
    ditron.barrier()  # its own pad, made on first use, stays
    real = tp_mlp_tuner.time_in_rounds
    got = []
    # room for the largest inbox and the scoreboards, not for every inbox at once; then
    # for the smallest only: the others drop out, and the tune still runs
    for room in (max(sizes) + 8192, min(sizes) + 8192):
        assert room < sum(sizes)
        filler = ditron.empty(((heap.size - heap.used_bytes - room) // 4,), torch.float32)
        used = heap.used_bytes
        timed = []

        def recording(runs, *args, timed=timed, **kwargs):
            timed.extend(sorted(runs))
            return real(runs, *args, **kwargs)

        tp_mlp_tuner.time_in_rounds = recording
        try:
            chosen = tp_mlp_tuner.tune_mlp(M, H, F * W, torch.float32, layers=1,
                                           configs=configs, warmup=0, iters=1,
                                           progress=False, save=False)
        finally:
            tp_mlp_tuner.time_in_rounds = real
        got.append((timed, chosen in configs, heap.used_bytes == used))
        ditron.free(filler)
    return got


def test_candidates_share_one_inbox(backend, tmp_path):
    got = ditron.launch(_tight_heap_case, 2, str(tmp_path), backend=backend)
    assert got == [[([0, 1, 2], True, True), ([0], True, True)]] * 2
