"""Every rank's derived schedule for three small two-layer MLP graphs (W = 2, 3, 4), pickled
to argv[1], with derive's host time: run once per tree (PYTHONPATH) and compare the pickles."""

import dataclasses
import pickle
import sys
import time

import torch

import ditron
from ditron import task as dt
from ditron.task.graph import derive
from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

CASES = ((2, 64, "16x64x64x128x2"), (3, 40, "16x32x64x64x4"), (4, 20, "16x64x128x256x1"))


def dump(tokens: int, label: str) -> tuple[dict, float]:
    w = ditron.world()
    F = 11008 // w.world_size // 4
    x = torch.zeros(tokens, 1024)
    g = dt.TaskGraph("t")
    h = inbox = None
    src = x
    for i in range(2):
        out = torch.empty_like(x)
        h, inbox = add_tp_mlp(g, src, torch.zeros(1024, F), torch.zeros(1024, F),
                              torch.zeros(F, 1024), out, residual=src if i else None, h=h,
                              inbox=inbox, blocks=MlpBlocks.parse(label), name=f"l{i}")
        src = out
    start = time.perf_counter()
    schedule = derive(g.tasks, w.rank, w.world_size)
    return dataclasses.asdict(schedule), time.perf_counter() - start


if __name__ == "__main__":
    out = {}
    for W, tokens, label in CASES:
        res = ditron.launch(dump, W, tokens, label, backend="cpu")
        out[(W, tokens, label)] = [r[0] for r in res]
        print(W, tokens, label, "derive s per rank", [round(r[1], 2) for r in res])
    with open(sys.argv[1], "wb") as f:
        pickle.dump(out, f)
