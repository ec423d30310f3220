"""ditron.nn: new layers' parameters. Every rank seeds torch alike (as a job does for its
replicated parameters); the shards of a layer must still differ (they were equal: ``W``
equal blocks, which stay equal in training), while the default generator stays in step
across ranks and a data-parallel replica (the same rank of another world) draws the same
shard."""

from __future__ import annotations

import itertools
import math

import torch

import ditron


def _init_case() -> dict:
    from ditron import nn

    me = ditron.world().rank
    W = ditron.world().world_size
    torch.manual_seed(0)
    col = nn.ColumnParallelLinear(24, 8 * W)
    row = nn.RowParallelLinear(8 * W, 24)
    experts = nn.ExpertParallelMLP(16, 8, 2 * W)
    after = torch.rand(4)  # the default generator, after the layers drew
    pair = ditron.init(group=[me - me % 2, me - me % 2 + 1])  # TP pairs, replicated twice
    torch.manual_seed(0)
    replica = nn.ColumnParallelLinear(24, 16)
    assert ditron.world() == pair and replica.weight.shape == (8, 24)
    return {"col": col.weight.detach(), "row": row.weight.detach(),
            "w1": experts.w1.detach(), "w2": experts.w2.detach(), "after": after,
            "col bias": col.bias.detach(), "row bias": row.bias.detach(),
            "replica": replica.weight.detach()}


def test_shards_differ_when_every_rank_seeds_alike(backend):
    W = 4
    got = ditron.launch(_init_case, W, backend=backend)
    for name, fan_in in (("col", 24), ("row", 8 * W), ("w1", 16), ("w2", 8)):
        for a, b in itertools.combinations(range(W), 2):
            assert not torch.equal(got[a][name], got[b][name]), f"{name}: ranks {a}, {b} equal"
        whole = torch.cat([got[r][name].flatten() for r in range(W)])
        bound = 1 / math.sqrt(fan_in)  # torch.nn.Linear's
        assert whole.abs().max() <= bound and whole.abs().max() > 0.8 * bound, name
    for r in range(W):
        assert torch.equal(got[r]["after"], got[0]["after"]), "generator out of step"
        assert not got[r]["col bias"].any() and not got[r]["row bias"].any()
    # pairs [0, 1] and [2, 3]: world rank 0 of each draws the same shard, rank 1 another
    assert torch.equal(got[0]["replica"], got[2]["replica"])
    assert torch.equal(got[1]["replica"], got[3]["replica"])
    assert not torch.equal(got[0]["replica"], got[1]["replica"])


def _device_context_case() -> bool:
    """Layers built inside ``with torch.device("meta")`` (a deferred-init model's context)
    or ``with torch.device("cpu")`` draw the shards and advance the default generator as
    without it. The seed of the shard generator was drawn on the context's device: under
    "meta" building a layer raised "Tensor.item() cannot be called on meta tensors"."""
    from ditron import nn

    W = ditron.world().world_size

    def build() -> tuple[list[torch.Tensor], torch.Tensor]:
        torch.manual_seed(3)
        layers = (nn.ColumnParallelLinear(12, 4 * W), nn.RowParallelLinear(4 * W, 12),
                  nn.ExpertParallelMLP(8, 4, W))
        return [p.detach() for m in layers for p in m.parameters()], torch.rand(3, device="cpu")

    want, after = build()
    for dev in ("meta", "cpu"):
        with torch.device(dev):
            got, got_after = build()
        assert torch.equal(got_after, after), dev
        for a, b in zip(got, want, strict=True):
            assert a.device == b.device and torch.equal(a, b), dev
    return True


def test_layers_built_under_a_device_context(backend):
    assert ditron.launch(_device_context_case, 2, backend=backend) == [True, True]
