"""A bad argument on one rank of ``ditron.nn``'s MoE forms (``moe_dispatch``,
``ExpertParallelMLP``), refused by their own checks before the dispatch, after a call of
the same signature was agreed: every rank raises, naming the rank, and the next good call
works. In debug mode the peers of a repeated call gather in the dispatch's check of the
expert ids (``runtime.agreement.refused_together(checks_data=True)``)."""

from __future__ import annotations

import pytest
import torch

import ditron

#: tokens per rank, hidden size, ffn size, top-k; 2 experts per rank
T, H, F, K = 5, 6, 4, 2


def _experts(w: int) -> list[tuple[torch.nn.Linear, torch.nn.Linear]]:
    """Every expert ``(up, down)`` of the model, seeded alike on every rank."""
    torch.manual_seed(7)
    return [(torch.nn.Linear(H, F, bias=False), torch.nn.Linear(F, H, bias=False))
            for _ in range(2 * w)]


def check_one_rank_refuses(case: str) -> str:
    """Rank 1 alone passes a bad argument in the second call of a signature (the first,
    agreed, skips the agreement gather); every rank must raise, and a good call afterwards
    (fresh inputs) must match torch on every rank."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    bad = me == 1
    experts = _experts(w)
    layer = ditron.nn.ExpertParallelMLP.from_experts(experts)
    g = torch.Generator().manual_seed(100 + me)

    def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (torch.randn(T, H, generator=g).to(dev),
                torch.randint(0, 2 * w, (T, K), generator=g).to(dev),
                torch.rand(T, K, generator=g).to(dev))

    def run(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
            wrong: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The case's call (``wrong``: with this rank's bad argument) and its reference."""
        if case == "moe_dispatch":  # identity experts: the weighted sum of k copies
            d = ditron.nn.moe.moe_dispatch(x, ids[:, 0] if wrong else ids, 2 * w)
            return ditron.nn.moe.moe_combine(d.x, d, weights), x * weights.sum(1, True)
        y = layer(x, ids, weights[:, :1] if wrong and case == "layer_weights" else weights,
                  max_tokens=x.tolist() if wrong and case == "layer_max_tokens" else None)
        ref = torch.stack([sum(weights[t, j] * experts[int(ids[t, j])][1](
            torch.nn.functional.gelu(experts[int(ids[t, j])][0](x[t]))) for j in range(K))
            for t in range(T)])
        return y, ref

    with torch.no_grad():
        got, want = run(*inputs())  # the signature agreed
        torch.testing.assert_close(got, want)
        with pytest.raises(ValueError) as err:
            run(*inputs(), wrong=bad)
        got, want = run(*inputs())
        torch.testing.assert_close(got, want)
    return str(err.value)


@pytest.mark.parametrize("case", ["moe_dispatch", "layer_weights", "layer_max_tokens"])
def test_a_bad_argument_on_one_rank_raises_on_every_rank(case, monkeypatch, backend):
    """Rank 1 raised alone while its peers waited in the expert ids' gather: the launch
    failed with 'ranks are in different collective calls' (or a peer took rank 1's next
    call's gather for the refused one's)."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    for rank, text in enumerate(ditron.launch(check_one_rank_refuses, 2, case,
                                              backend=backend)):
        assert rank == 1 or "rank 1" in text and "refused" in text, text
