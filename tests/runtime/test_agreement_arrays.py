"""Tensors and NumPy arrays as fields of an agreement: ranks agree only where their values
are equal element for element. The digest that lets agreeing ranks skip the second gather
was taken of their ``repr``, which rounds floats to four decimals and elides all but the
edges of more than a thousand elements: ranks that differed there agreed silently."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ditron
from ditron.runtime import host_rows
from ditron.runtime.agreement import agree


def _differs_by_one_element(n: int, me: int, seed: int) -> dict[str, object]:
    """Fields equal on every rank except one element on rank 1, past what ``repr`` shows."""
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g)
    a = np.random.default_rng(seed).random(n)
    small = torch.rand((), generator=g)
    if me == 1:
        t[n // 2] += 1.0  # elided from a repr of more than a thousand elements
        a[n // 2] += 1.0
        small += 1e-6  # rounded away in a repr of four decimals
    return {"tensor": t, "array": a, "scalar": small}


def _agreements(seed: int) -> tuple[list[str], list[str]]:
    """Each field alone, once differing on rank 1, once equal on every rank (bf16, a
    transposed view against a contiguous copy, a conjugate view)."""
    me = ditron.world().rank
    raised = []
    for name, value in _differs_by_one_element(2048, me, seed).items():
        with pytest.raises(ValueError, match="ranks disagree on the call") as info:
            agree(f"test.{name}", remember=False, v=value)
        raised.append(str(info.value).splitlines()[0])
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(40, 60, generator=g).to(torch.bfloat16)
    z = torch.randn(30, generator=g, dtype=torch.complex64)
    agreed = []
    for name, value in (("bf16", x), ("view", x.t() if me == 0 else x.t().contiguous()),
                        ("conj", z.conj() if me == 0 else z.conj().resolve_conj()),
                        ("array", np.arange(3000) * 0.5)):
        agree(f"test.equal.{name}", remember=False, v=value)
        agreed.append(name)
    return raised, agreed


@pytest.mark.parametrize("world_size", [2, 3])
def test_arrays_that_differ_anywhere_disagree(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "120")
    seed = int(torch.randint(0, 2**31 - 1, ()))
    for raised, agreed in ditron.launch(_agreements, world_size, seed, backend=backend):
        assert raised == [f"test.{n}: ranks disagree on the call (v differs):"
                          for n in ("tensor", "array", "scalar")]
        assert agreed == ["bf16", "view", "conj", "array"]


def test_digest_reads_every_element():
    t = torch.rand(5000)
    u = t.clone()
    u[2500] += 1e-3
    assert repr(t) == repr(u)  # what the digest was taken of
    assert host_rows.digest(t) != host_rows.digest(u)
    assert host_rows.digest(t) == host_rows.digest(t.clone())
    assert host_rows.digest(torch.tensor([1.0])) != host_rows.digest(torch.tensor(1.0))
    assert host_rows.digest(t.to(torch.float64)) != host_rows.digest(t)
    a = np.random.default_rng(0).random(5000)
    b = a.copy()
    b[2500] += 1e-3
    assert host_rows.digest(a) != host_rows.digest(b)
    assert host_rows.digest(a[::2]) == host_rows.digest(a[::2].copy())
    # no bytes to read: written by repr, as before
    assert host_rows.digest(torch.empty(3, device="meta")) == \
        host_rows.digest(torch.empty(3, device="meta"))
