"""``runtime.tensor_spans`` under a caller's default device: the checks of ``out=`` make
host tensors of element offsets, which must stay on the CPU whatever ``torch.device(...)``
the caller is in (``elements_meet`` made them on the default device: under ``meta`` an op's
check raised "Tensor.item() cannot be called on meta tensors", on a GPU it copied to and
synchronised with the device)."""

from __future__ import annotations

import pytest
import torch

from ditron.runtime.tensor_spans import elements_meet, shares_memory


def _bytes_of(t: torch.Tensor) -> set[int]:
    """Every byte address ``t``'s elements cover (the reference)."""
    base = t.data_ptr()
    size = t.element_size()
    out = set()
    for index in torch.cartesian_prod(*[torch.arange(n) for n in t.shape]).reshape(
            -1, t.dim()).tolist():
        start = base + size * sum(i * st for i, st in zip(index, t.stride(), strict=True))
        out.update(range(start, start + size))
    return out


def _layouts(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Pairs of views of one buffer: interleaved columns, overlapping rows, strided pieces
    at random offsets, a dtype view."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(6, 16)
    pairs = [(x[:, ::2], x[:, 1::2]), (x[:, ::2], x[:, 2::4]), (x[1:4], x[3:])]
    for _ in range(6):
        r0, r1 = (int(v) for v in torch.randint(0, 6, (2,), generator=g))
        c0, c1 = (int(v) for v in torch.randint(0, 4, (2,), generator=g))
        s0, s1 = (int(v) for v in torch.randint(1, 4, (2,), generator=g))
        pairs.append((x[r0:, c0::s0], x[r1:, c1::s1]))
    pairs.append((x[:, 1::2], x.view(torch.float16)[:, 1::4]))
    return pairs


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_elements_meet_on_host_tensors_whatever_the_default_device(device):
    seed = int(torch.randint(0, 2**31 - 1, ()))
    for a, b in _layouts(seed):
        want = bool(_bytes_of(a) & _bytes_of(b))
        with torch.device(device):
            assert elements_meet(a, b) == want, (seed, a.stride(), b.stride())
            assert elements_meet(b, a) == want


def test_shares_memory_whatever_the_default_device():
    x = torch.zeros(4, 8)
    with torch.device("meta"):
        assert shares_memory(x.as_strided((4, 4), (2, 1)))
        assert not shares_memory(x.as_strided((4, 4), (8, 2)))
