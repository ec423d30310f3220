from __future__ import annotations

import pytest
import torch

from ditron.kernels.offsets import INT32_SPAN, check_int32_offsets, element_span, wide


def test_element_span_counts_what_offsets_reach():
    t = torch.empty(6, 8)
    assert element_span(t) == 48
    assert element_span(t.t()) == 48
    assert element_span(t[::2, 1:5]) == 4 * 8 + 3 + 1  # rows 0, 2, 4; columns 1..4
    assert element_span(torch.empty(5, 3).expand(2, 5, 3)) == 15
    assert element_span(torch.empty(0, 7)) == 0
    far = torch.empty_strided((3, 2), (2**30, 1), device="meta")  # no memory behind it
    assert element_span(far) == 2 * 2**30 + 2


def test_wide_and_the_refusal_at_the_int32_limit():
    base = torch.empty(4)
    # span exactly 2**31 (the last offset fits in int32), and one more
    at = torch.empty_strided((2, 2), (INT32_SPAN - 2, 1), device="meta")
    past = torch.empty_strided((2, 2), (INT32_SPAN - 1, 1), device="meta")
    assert element_span(at) == INT32_SPAN and element_span(past) == INT32_SPAN + 1
    assert not wide(at, None, base) and wide(None, past)
    check_int32_offsets("op", a=at, b=None)
    with pytest.raises(ValueError, match=r"op: b \(2, 2\) with strides \(2147483647, 1\) "
                                         r"spans 2147483649 elements"):
        check_int32_offsets("op", a=at, b=past)
