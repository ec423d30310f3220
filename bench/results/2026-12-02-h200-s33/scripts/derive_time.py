"""Host time of ditron.task.graph.derive for the 2-layer MLP graph the tuner builds."""
import sys
import time

import torch

import ditron
from ditron import task as dt
from ditron.task.graph import derive
from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp


def case(tokens, hidden, ffn, label, layers=2):
    w = ditron.world()
    W = w.world_size
    F = ffn // W
    x = torch.zeros(tokens, hidden)
    g = dt.TaskGraph("t")
    h = inbox = None
    src = x
    for i in range(layers):
        wg, wu = torch.zeros(hidden, F), torch.zeros(hidden, F)
        wd = torch.zeros(F, hidden)
        out = torch.empty_like(x)
        h, inbox = add_tp_mlp(g, src, wg, wu, wd, out, residual=src, h=h, inbox=inbox,
                              blocks=MlpBlocks.parse(label), name=f"l{i}")
        src = out
    n = sum(t.tiles for t in g.tasks)
    t0 = time.perf_counter()
    s = derive(g.tasks, w.rank, W)
    return n, len(s.dep_slot), time.perf_counter() - t0


if __name__ == "__main__":
    tokens, W, label = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for r in ditron.launch(case, W, tokens, 4096, 11008, label, backend="cpu")[:1]:
        print(f"tokens {tokens} W {W} {label}: {r[0]} items, {r[1]} waits, derive {r[2]:.2f} s")
