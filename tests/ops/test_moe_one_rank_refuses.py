"""A bad argument on one rank of ``moe_dispatch`` / ``moe_combine`` after a call of the same
signature was agreed: every rank raises, naming the rank, and the next good call works."""

from __future__ import annotations

import pytest
import torch

import ditron


def check_one_rank_refuses(case: str) -> str:
    """Rank 1 alone passes a bad argument in the second call of a signature (the first,
    agreed, skips the agreement gather); every rank must raise (none may wait for it), and
    a good call afterwards must give the right rows on every rank."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    ops = ditron.ops
    g = torch.Generator().manual_seed(me)
    x = torch.randn(4, 6, generator=g).to(dev)
    ids = torch.randint(0, 2 * w, (4, 2), generator=g).to(dev)
    weights = torch.rand(4, 2, generator=g).to(dev)
    d = ops.moe_dispatch(x, ids, 2 * w)
    ops.moe_combine(d.x, d, weights)  # both signatures agreed
    bad = me == 1
    calls = {
        "dispatch_ids": lambda: ops.moe_dispatch(x, ids.float() if bad else ids, 2 * w),
        "dispatch_shape": lambda: ops.moe_dispatch(x, ids[:4 - bad], 2 * w),
        "combine_weights": lambda: ops.moe_combine(d.x, d, weights[:, :2 - bad]),
        "combine_y": lambda: ops.moe_combine(d.x[:d.x.shape[0] - bad], d, weights),
        # not tensors: a TypeError naming the argument (an AttributeError, "'list' object
        # has no attribute 'dim'", before), a ValueError naming it on the peers
        "dispatch_list": lambda: ops.moe_dispatch(x, ids.tolist() if bad else ids, 2 * w),
        "combine_list": lambda: ops.moe_combine(d.x.tolist() if bad else d.x, d, weights),
    }
    with pytest.raises(TypeError if bad and case.endswith("_list") else ValueError) as err:
        calls[case]()
    d = ops.moe_dispatch(x, ids, 2 * w)
    out = ops.moe_combine(d.x, d, weights)  # identity experts
    torch.testing.assert_close(out, x * weights.sum(1, keepdim=True))
    return str(err.value)


@pytest.mark.parametrize("case", ["dispatch_ids", "dispatch_shape", "combine_weights",
                                  "combine_y", "dispatch_list", "combine_list"])
def test_a_bad_argument_on_one_rank_raises_on_every_rank(case, monkeypatch, backend):
    """In debug mode the peers of a rank that refused its arguments in a repeated call
    waited in the next gather (the dispatch's expert id check, the combine's all-to-all
    check) while it raised alone: the launch failed with 'ranks are in different
    collective calls', or a peer took that rank's next call for the refused one."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    errors = ditron.launch(check_one_rank_refuses, 2, case, backend=backend)
    for rank, text in enumerate(errors):
        assert "rank 1" in text or rank == 1, text
        assert "torch.Tensor" in text or not case.endswith("_list"), text


def check_counts_not_a_tensor() -> str:
    """Rank 1 passes a list to ``exchange_counts`` (the op's first call)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    counts = torch.arange(3 * w, device=dev).view(w, 3) + 10 * me
    with pytest.raises(TypeError if me == 1 else ValueError) as err:
        ditron.ops.exchange_counts(counts.tolist() if me == 1 else counts)
    got = ditron.ops.exchange_counts(counts)
    assert got.tolist() == [[3 * me + i + 10 * s for i in range(3)] for s in range(w)]
    return str(err.value)


def test_exchange_counts_refuses_a_list(backend):
    """A list raised AttributeError ("'list' object has no attribute 'dim'")."""
    for rank, text in enumerate(ditron.launch(check_counts_not_a_tensor, 2, backend=backend)):
        assert "counts must be an integer [2, L] torch.Tensor" in text, text
        assert "rank 1" in text or rank == 1, text
