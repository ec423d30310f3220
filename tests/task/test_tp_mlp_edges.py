"""``add_tp_mlp``'s edges: bad arguments refused before any task, allocation or kernel (on
every rank, naming the rank, when the call is collective), dtypes the tiles do not compute
in, scratch buffers of another dtype, and one or no rows."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron import task as dt

from .test_megakernel import _mlp_case

M, H, F = 20, 24, 16


def _one_rank_refuses_case(tuned: bool) -> list[str]:
    """Rank 1 alone passes a bad argument to a collective ``add_tp_mlp`` (rank 0's tuned
    blocks, or given blocks and an inbox to allocate); every rank returns what it raised."""
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

    w = ditron.world()
    dev = w.device
    got = []
    for how in ("w_down", "2-d", "dtype", "rows"):
        x = torch.randn(M, H, device=dev)
        wg, wd = torch.randn(H, F, device=dev), torch.randn(F, H, device=dev)
        out = torch.empty_like(x)
        if w.rank == 1:
            if how == "w_down":
                wd = torch.randn(F, H + 1, device=dev)
            elif how == "2-d":
                x = x[None]
            elif how == "dtype":
                out = out.half()
            else:
                x = torch.randn(M + 1, H, device=dev)
                out = torch.empty_like(x)
        blocks = None if tuned else MlpBlocks(16, 16, 16, 32, 2)
        graph = dt.TaskGraph("refused")
        with pytest.raises(ValueError) as info:
            add_tp_mlp(graph, x, wg, wg, wd, out, blocks=blocks)
        assert not graph.tasks
        got.append(str(info.value))
    return got


@pytest.mark.parametrize("tuned", [True, False])
def test_a_rank_refusing_its_mlp_arguments_raises_on_every_rank(tuned, backend, monkeypatch):
    # rank 1 raised alone while rank 0 waited in the tuned blocks' gather or the inbox's
    # allocation: rank 0 then failed (or hung, had rank 1 gone on to another collective)
    # naming only "ditron.shutdown", not rank 1's problem
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_one_rank_refuses_case, 2, tuned, backend=backend)
    problems = ("add_tp_mlp: w_down has shape (16, 25), expected (16, 24)",
                "add_tp_mlp: x and the weights must be 2-d",
                "add_tp_mlp: out is torch.float16")
    for mine, theirs, problem in zip(got[0], got[1], problems, strict=False):
        assert mine.startswith("add_tp_mlp: a rank refused the call's arguments:\n"
                               f"  rank 1: ValueError: {problem}"), mine
        assert theirs.startswith(problem), theirs
    # other rows on one rank: both name the difference (was: ditron.empty's inbox shapes)
    assert got[0][3] == got[1][3]
    assert got[0][3].startswith("add_tp_mlp: ranks disagree on the call (x differs)")
    assert "rank 1: x=(21, 24)" in got[0][3]


def _refusals_case() -> list[str]:
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

    dev = ditron.world().device
    blocks = MlpBlocks(16, 16, 16, 32, 2)
    messages = []

    def refused(dtype=torch.float32, blocks=blocks, **scratch) -> None:
        x = torch.randn(M, H, device=dev).to(dtype)
        wg, wd = torch.randn(H, F, device=dev).to(dtype), torch.randn(F, H, device=dev).to(dtype)
        graph = dt.TaskGraph("refused")
        with pytest.raises(ValueError) as info:
            add_tp_mlp(graph, x, wg, wg, wd, torch.empty_like(x), blocks=blocks, **scratch)
        assert not graph.tasks
        messages.append(str(info.value))

    # fp64 was computed in fp32 (1e-7 errors, silently), ints and complex numbers failed
    # at the first call or returned garbage
    for dtype in (torch.float64, torch.int32, torch.complex64):
        refused(dtype)
    # scratch of another dtype or device was written through its own element type: an fp16
    # h or inbox under fp32 tiles lost precision, an int32 h returned garbage
    refused(h=torch.empty(M, F, dtype=torch.float16, device=dev))
    refused(h=torch.empty(M, F, dtype=torch.int32, device=dev))
    refused(h=torch.empty(M, F, device="meta"))
    refused(inbox=ditron.empty((M, H), torch.float16))
    refused(inbox=ditron.empty((2 * M, H), torch.float32))  # 1 split-K slot: M rows
    # a truthy string turned the TMA path on
    refused(blocks=MlpBlocks(16, 16, 16, 32, 2, tma="0"))
    return messages


def test_add_tp_mlp_refuses_other_dtypes_and_foreign_scratch(backend):
    wanted = ("x is torch.float64; the tiles compute in torch.float16, torch.bfloat16, "
              "torch.float32", "x is torch.int32", "x is torch.complex64",
              "h is torch.float16", "h is torch.int32", "h is torch.float32 on meta",
              "inbox is torch.float16",
              "inbox must be [20, 24] (world size x 1 split-K slots x 20 rows) for these "
              "blocks, got (40, 24)",
              "tma must be None, True or False, got '0'")
    messages = ditron.launch(_refusals_case, 1, backend=backend)[0]
    assert len(messages) == len(wanted)
    for message, want in zip(messages, wanted, strict=True):
        assert message.startswith(f"add_tp_mlp: {want}"), message


def _few_rows_case() -> list[int]:
    from ditron.task.tp_mlp import MlpBlocks

    blocks = MlpBlocks(16, 16, 16, 32, 2)
    # one token (a partial row tile) and none (no tiles of up, down or reduce)
    return [_mlp_case(rows, H, F, 1, torch.float32, 2, blocks) for rows in (1, 0)]


def test_tp_mlp_with_one_or_no_rows(backend):
    assert ditron.launch(_few_rows_case, 3, backend=backend) == [[2, 2]] * 3
