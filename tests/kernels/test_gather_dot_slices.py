"""The gather-dot's column slices (``kernels/gather_sum.gather_dot``): a count, checked as
every integer knob is (``runtime/integers.py``)."""

from __future__ import annotations

import pytest
import torch

from ditron.kernels.gather_sum import gather_dot


def test_slices_must_be_a_positive_int():
    """Before, a float (``2.0``) failed inside torch with a ``TypeError`` about
    ``new_empty``'s size, and ``0`` or a negative count ran as one slice."""
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**20, (1,))))
    src, grad = torch.randn(29, 600, generator=g), torch.randn(13, 600, generator=g)
    idx = torch.randint(-1, 29, (13, 3), generator=g)
    for bad in (2.0, 2.5, 0, -1, True, torch.tensor(2)):
        with pytest.raises(ValueError, match="gather_dot: slices must be a positive int"):
            gather_dot(src, idx, grad, slices=bad)
    rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)], 0.0)
    want = (rows * grad[:, None, :]).sum(2)
    for slices in (1, 3, 100):  # 100: more than the column blocks, as many as there are
        torch.testing.assert_close(gather_dot(src, idx, grad, slices=slices), want,
                                   atol=1e-4 * 600 ** 0.5, rtol=1e-4)
