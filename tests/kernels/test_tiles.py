"""The task tiles' tile ids: the kernels' ``_coords`` and the host's ``tile_box`` agree, and
both follow the grouped order of ``swizzle.grouped``."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from ditron.kernels import swizzle, tiles


@triton.jit
def _blocks_of_tiles(out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tile = tl.program_id(0)
    offs_m, offs_n = tiles._coords(tile, M, N, BLOCK_M, BLOCK_N)
    tl.store(out + 2 * tile, tl.min(offs_m, axis=0) // BLOCK_M)
    tl.store(out + 2 * tile + 1, tl.min(offs_n, axis=0) // BLOCK_N)


# (M, N, block_m, block_n): one row block (decode), a few, exactly GROUP_M, and a last
# group shorter than the others; extents that do not divide into blocks
SHAPES = [(16, 300, 16, 32), (100, 96, 16, 32), (128, 70, 16, 16), (170, 50, 16, 16),
          (33, 33, 16, 16)]


@pytest.mark.parametrize("M,N,bm,bn", SHAPES)
def test_host_and_kernel_tiles_follow_the_grouped_order(M, N, bm, bn):
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    count = tiles.num_tiles(M, N, bm, bn)
    assert count == tiles_m * tiles_n
    order = swizzle.grouped(range(tiles_m), tiles_n, tiles.GROUP_M)
    want = [divmod(t, tiles_n) for t in order]
    host = [tiles.tile_box(t, M, N, bm, bn) for t in range(count)]
    assert [(r[0] // bm, c[0] // bn) for r, c in host] == want
    assert all(r[1] - r[0] == bm and c[1] - c[0] == bn for r, c in host)
    out = torch.full((count, 2), -1, dtype=torch.int32)
    _blocks_of_tiles[(count,)](out, M, N, bm, bn)
    assert [tuple(p) for p in out.tolist()] == want


def test_tile_box_refuses_a_tile_outside_the_output():
    """Before, tile 100 of a 2 x 2 tiling gave columns (-16, 0) and tile -1 a box at row
    -16 (regions built from them silently wrong); a 0-row output divided by zero."""
    assert tiles.tile_box(3, 20, 20, 16, 16) == ((16, 32), (16, 32))
    for tile, M in ((4, 20), (100, 20), (-1, 20), (0, 0)):
        with pytest.raises(ValueError, match=rf"tile_box: tile {tile} of an \[{M}, 20\] "
                                             rf"output in 16 x 16 tiles must lie in"):
            tiles.tile_box(tile, M, 20, 16, 16)
