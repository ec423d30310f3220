"""The TP GEMMs over many calls with fresh operands, as a training loop makes them."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _gather


def _sm_tables_case(m: int, K: int, N: int, calls: int) -> list[int]:
    """AG-GEMM by the sm engine, whole shards and 4-row chunks, each call on a new ``a``
    (all kept alive, so every one has its own address); returns the engine's number of
    descriptor tables after each call."""
    from ditron.runtime.world import current

    poison_empty()
    w = ditron.world()
    torch.manual_seed(w.rank)
    b = torch.randn(N, K, device=w.device).t()
    kept, tables = [], []
    for chunk_rows in (None, 4):
        for _ in range(calls):
            a = torch.randn(m, K, device=w.device)
            kept.append(a)
            c, ga = ditron.ops.ag_gemm(a, b, return_gathered=True, method="overlap",
                                       engine="sm", chunk_rows=chunk_rows)
            _close(f"ag_gemm[sm, chunk_rows={chunk_rows}]", c, _gather(a).double() @ b.double(),
                   torch.float32)
            assert torch.equal(ga, _gather(a)), "ag_gemm[sm]: gathered A differs"
            engines = current().cache["collectives:engines"]
            tables.append(sum(len(e._tables) for k, e in engines.items() if k[0] == "sm"))
    return tables


@pytest.mark.parametrize("m", [13, 32], ids=["own-rows-copied", "own-rows-in-place"])
def test_sm_engine_ag_gemm_keeps_its_tables_over_fresh_inputs(backend, m):
    # The sm engine's descriptor table of a push batch is keyed by its addresses; making
    # one is a synchronous host-to-device copy (the host waits for its stream). The pushes
    # read from a, so a new a each call (a fresh activation each step) made a new table
    # each call, up to the engine's cache of 256: now they read the rank's rows of the
    # gathered buffer (one table per buffer half and chunking).
    calls = 5
    tables = ditron.launch(_sm_tables_case, 2, m, 24, 40, calls, backend=backend)
    assert tables == [[1, 2, 2, 2, 2, 3, 4, 4, 4, 4]] * 2


def _graph_engines_case() -> list[str]:
    """Graph-safe AG-GEMMs (eagerly inside ``graph_safe()``) whose ranks ask for different
    engines, one of them without a graph-safe variant; then a matching call."""
    w = ditron.world()
    torch.manual_seed(w.rank)
    a, b = torch.randn(8, 16, device=w.device), torch.randn(16, 24, device=w.device)
    seen = []
    for other in ("sm", "tma", "colocated"):
        with ditron.ops.graph_safe(), pytest.raises(ValueError) as info:
            ditron.ops.ag_gemm(a, b, method="overlap", engine=(other, "copy_engine")[w.rank])
        seen.append(str(info.value).splitlines()[0])
    with ditron.ops.graph_safe():
        c = ditron.ops.ag_gemm(a, b, method="overlap", engine="copy_engine")
    _close("graph-safe ag_gemm after the refusals", c, _gather(a).double() @ b.double(),
           torch.float32)
    return seen


def test_graph_safe_ag_gemm_ranks_asking_for_different_engines_raise_together(backend):
    # An engine without a graph-safe variant made its rank raise (method="overlap") or fall
    # back ("auto") alone, before the ranks agreed on the engine: the others waited for it
    # in that agreement (or for its pushes), and only DITRON_CHECK_CALLS's check at shutdown
    # ended the run.
    expected = ["ditron.ops.ag_gemm transfers: ranks disagree on the call (engine differs):"] * 3
    assert ditron.launch(_graph_engines_case, 2, backend=backend) == [expected] * 2
