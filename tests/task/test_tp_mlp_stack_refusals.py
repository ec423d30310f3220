"""``add_tp_mlp_stack`` refuses a later layer's bad operands on every rank, before any
layer is added: with given tiles only the first layer's call is collective (its inbox), so
a rank refusing layer 1's weights raised alone while its peers went on to compile without
it (failing there, or hanging in their gather, not naming its problem)."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron import task as dt

M, H, F = 20, 24, 16


def _later_layer_refused_case() -> list[str]:
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp_stack

    w = ditron.world()
    dev = w.device
    got = []
    for how in ("w_down", "ffn"):
        layers = [(torch.randn(H, F, device=dev), torch.randn(H, F, device=dev),
                   torch.randn(F, H, device=dev)) for _ in range(2)]
        if w.rank == 1 and how == "w_down":
            layers[1] = (*layers[1][:2], torch.randn(F, H + 1, device=dev))
        elif how == "ffn":  # every rank: the layers share one h
            layers[1] = (torch.randn(H, 2 * F, device=dev), torch.randn(H, 2 * F, device=dev),
                         torch.randn(2 * F, H, device=dev))
        graph = dt.TaskGraph("refused")
        with pytest.raises(ValueError) as info:
            add_tp_mlp_stack(graph, torch.randn(M, H, device=dev), layers,
                             blocks=MlpBlocks(16, 16, 16, 32, 2))
        assert not graph.tasks  # nothing added, no inbox allocated
        got.append(str(info.value))
    return got


def test_a_later_layer_refused_on_one_rank_raises_on_every_rank(backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_later_layer_refused_case, 2, backend=backend)
    problem = "add_tp_mlp: w_down has shape (16, 25), expected (16, 24)"
    assert got[0][0].startswith("add_tp_mlp: a rank refused the call's arguments:\n"
                                f"  rank 1: ValueError: {problem}"), got[0][0]
    assert got[1][0].startswith(problem), got[1][0]
    for mine in (got[0][1], got[1][1]):
        assert "add_tp_mlp_stack: layer 1 has 32 ffn columns, layer 0 16" in mine, mine
