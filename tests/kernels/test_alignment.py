"""Which operands' pointer loads vectorize, and the smaller GPU tiles the GEMMs' default
configs take for those that do not (``kernels/alignment.py``). No GPU needed: the configs
are picked for an H200 (capability 9.0) and only the operands' layout is read; that those
tiles compile without spills is ``test_gpu_tiles.py``'s check."""

from __future__ import annotations

import pytest
import torch

from ditron.kernels import descriptors, gemm
from ditron.kernels import grouped_gemm as gg
from ditron.kernels.alignment import vector_loads

CUDA = torch.device("cuda", 0)
BF16 = torch.bfloat16


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.delenv("DITRON_GEMM_TMA", raising=False)
    monkeypatch.delenv("DITRON_GEMM_BLOCKS", raising=False)
    monkeypatch.setattr(descriptors, "capability", lambda device: (9, 0))


def test_vector_loads():
    x = torch.empty(64, 192, dtype=BF16)
    assert vector_loads(x)
    assert vector_loads(torch.empty(320, 192, dtype=BF16).t())  # a linear weight, as [K, N]
    assert vector_loads(x[:, :64])  # row stride 192, 64 columns
    assert vector_loads(torch.empty(1, 48))  # one row: its stride is never used
    assert not vector_loads(torch.empty(64, 100, dtype=BF16))  # K = 100
    assert vector_loads(torch.empty(257, 192, dtype=BF16).t())  # loads run along K = 192
    assert not vector_loads(torch.empty(192, 257, dtype=BF16))  # row stride 257
    assert not vector_loads(x[:, :100])  # 100 columns
    assert not vector_loads(x[:, 8:])  # base 16 bytes in: aligned, but 184 columns
    assert not vector_loads(x[:, 1:17])  # base 2 bytes in
    assert not vector_loads(x[:, ::2])  # no unit stride
    assert vector_loads(torch.empty(3, 320, 192, dtype=BF16).transpose(1, 2))
    assert not vector_loads(torch.empty(3, 192, 257, dtype=BF16))


def test_vector_loads_sees_the_row_stride_of_a_column_slice():
    x = torch.empty(64, 200, dtype=BF16)
    assert not vector_loads(x[:, :192])  # 192 columns, but rows 200 apart


def _tiles(cfg: gemm.GemmConfig) -> tuple[int, int, int, int]:
    return cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps


def _gemm_tiles(a, b, epilogue=gemm.EPI_STORE):
    return _tiles(gemm.default_config(CUDA, a.dtype, (a, b), epilogue))


def test_gemm_tiles_for_unaligned_operands(h200, monkeypatch):
    default = _gemm_tiles(torch.empty(8, 192, dtype=BF16), torch.empty(320, 192, dtype=BF16).t())
    assert default == (128, 256, 64, 8)
    assert _gemm_tiles(torch.empty(8, 192, dtype=BF16), torch.empty(192, 320, dtype=BF16)) \
        == default
    narrow = (128, 128, 32, 8)
    # K = 100: rows of 200 bytes, no TMA, scalar pointer loads
    assert _gemm_tiles(torch.empty(8, 100, dtype=BF16),
                       torch.empty(320, 100, dtype=BF16).t()) == narrow
    # a row-major weight of N = 257 columns: no TMA either
    assert _gemm_tiles(torch.empty(8, 192, dtype=BF16),
                       torch.empty(192, 257, dtype=BF16)) == narrow
    # N = 257 of a linear weight's rows only changes the store; K = 200: 400-byte rows
    # load through TMA
    k200 = torch.empty(8, 200, dtype=BF16), torch.empty(257, 200, dtype=BF16).t()
    assert _gemm_tiles(*k200) == default
    monkeypatch.setenv("DITRON_GEMM_TMA", "0")  # ... unless the pointer path is forced
    assert _gemm_tiles(*k200) == narrow
    monkeypatch.setattr(descriptors, "capability", lambda device: (8, 0))  # an A100
    monkeypatch.delenv("DITRON_GEMM_TMA")
    assert _gemm_tiles(*k200) == narrow


def test_a_given_scalar_answer_is_the_one_computed(h200):
    """``default_config(..., scalar=scalar_loads(a, b, device))`` (what the TP ops pass, so
    the check runs once per call) picks what the operands alone would."""
    layouts = [(torch.empty(8, 192, dtype=BF16), torch.empty(320, 192, dtype=BF16).t()),
               (torch.empty(8, 100, dtype=BF16), torch.empty(320, 100, dtype=BF16).t()),
               (torch.empty(8, 192, dtype=BF16), torch.empty(192, 257, dtype=BF16))]
    for a, b in layouts:
        scalar = gemm.scalar_loads(a, b, CUDA)
        for epilogue in (gemm.EPI_STORE, gemm.EPI_REDUCE_SCATTER):
            assert gemm.default_config(CUDA, BF16, (a, b), epilogue, scalar=scalar) \
                == gemm.default_config(CUDA, BF16, (a, b), epilogue)
    assert [gemm.scalar_loads(a, b, CUDA) for a, b in layouts] == [False, True, True]


def test_gemm_tiles_for_the_scatter_epilogues(h200):
    a = torch.empty(8, 192, dtype=BF16)
    for epilogue in (gemm.EPI_REDUCE_SCATTER, gemm.EPI_ALL_REDUCE):
        assert _gemm_tiles(a, torch.empty(320, 192, dtype=BF16).t(), epilogue) \
            == (128, 256, 64, 8)
        # the peers' partials are [rows, 257]: loaded one element at a time
        assert _gemm_tiles(a, torch.empty(257, 192, dtype=BF16).t(), epilogue) \
            == (64, 128, 32, 8)
        # K = 200: bf16 loads through TMA (the default stays), fp32 through pointers
        assert _gemm_tiles(torch.empty(8, 200, dtype=BF16),
                           torch.empty(320, 200, dtype=BF16).t(), epilogue) == (128, 256, 64, 8)
        assert _gemm_tiles(torch.empty(8, 200), torch.empty(320, 200).t(), epilogue) \
            == (64, 128, 32, 8)


def test_gemm_tiles_for_a_pulled_from_peers(h200):
    """The colocated pull loads A rows from the peers' heaps through per-row pointers:
    smaller tiles, aligned operands too (bf16 128 x 256 x 64 spilled 1.3 KB)."""
    a, b = torch.empty(8, 192, dtype=BF16), torch.empty(320, 192, dtype=BF16).t()
    assert gemm.default_config(CUDA, BF16, (a, b), a_remote=True) \
        == gemm.default_config(CUDA, BF16, a_remote=True)
    assert _tiles(gemm.default_config(CUDA, BF16, a_remote=True)) == (128, 128, 32, 8)
    assert gemm.default_config(torch.device("cpu"), BF16, a_remote=True) \
        == gemm.default_config(torch.device("cpu"), BF16)


def test_cpu_and_fp32_configs_ignore_alignment(h200):
    cpu = gemm.default_config(torch.device("cpu"), BF16)
    odd = torch.empty(8, 100, dtype=BF16), torch.empty(192, 257, dtype=BF16)
    assert gemm.default_config(torch.device("cpu"), BF16, odd, gemm.EPI_ALL_REDUCE) == cpu
    fp32 = gemm.default_config(CUDA, torch.float32)
    assert gemm.default_config(CUDA, torch.float32, tuple(t.float() for t in odd)) == fp32


def test_blocks_override_applies_to_unaligned_operands(h200, monkeypatch):
    monkeypatch.setenv("DITRON_GEMM_BLOCKS", "64x64x32")
    odd = torch.empty(8, 100, dtype=BF16), torch.empty(192, 257, dtype=BF16)
    assert _gemm_tiles(*odd)[:3] == (64, 64, 32)


def _grouped_tiles(x, w, rows_per_group=None):
    cfg = gg.default_config(CUDA, x.dtype, rows_per_group, (x, w))
    return cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages


def test_grouped_tiles_for_unaligned_operands(h200):
    x, w = torch.empty(64, 192, dtype=BF16), torch.empty(4, 320, 192, dtype=BF16)
    assert _grouped_tiles(x, w.transpose(1, 2)) == (128, 256, 64, 8, 3)
    assert _grouped_tiles(x, w.transpose(1, 2), 16) == (64, 128, 64, 4, 4)
    x, w = torch.empty(64, 100, dtype=BF16), torch.empty(4, 320, 100, dtype=BF16)
    assert _grouped_tiles(x, w.transpose(1, 2)) == (128, 128, 32, 8, 3)
    assert _grouped_tiles(x, w.transpose(1, 2), 16) == (64, 128, 32, 8, 4)
    # K = 200 with a [G, N, K] weight: TMA boxes on both, the large tiles stay
    x, w = torch.empty(64, 200, dtype=BF16), torch.empty(4, 320, 200, dtype=BF16)
    assert _grouped_tiles(x, w.transpose(1, 2)) == (128, 256, 64, 8, 3)
    # ... but a [G, K, N] weight needs whole K blocks for its boxes: pointer loads
    assert _grouped_tiles(x, torch.empty(4, 200, 320, dtype=BF16)) == (128, 128, 32, 8, 3)
