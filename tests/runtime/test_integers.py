"""Integer arguments are taken one way everywhere (``runtime/integers.py``): a Python int
or a NumPy integer (stored as a plain int), never a bool, a float or a tensor, with an
error naming the argument before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ditron
from ditron.engines.copy_engine import CopyEngine
from ditron.kernels.gemm import GemmConfig
from ditron.runtime.integers import as_int, check_int


@pytest.mark.parametrize("value, expected", [
    (3, 3), (np.int64(3), 3), (np.uint8(7), 7), (-2, -2),
    (True, None), (np.True_, None), (3.0, None), (np.float64(3), None),
    (torch.tensor(3), None), ("3", None), (None, None)])
def test_as_int(value, expected):
    got = as_int(value)
    assert got == expected and (got is None or type(got) is int)


def test_check_int_messages():
    assert check_int(np.int32(5), "n", 1) == 5
    with pytest.raises(ValueError, match=r"^n must be a positive int, got 0$"):
        check_int(0, "n", 1)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0, got True$"):
        check_int(True, "n")
    with pytest.raises(TypeError, match=r"^n must be an int in \[2, 4\), got 4$"):
        check_int(4, "n", 2, 4, error=TypeError)


def test_host_objects_take_numpy_ints_and_refuse_bools():
    cfg = GemmConfig(block_m=np.int64(64), num_warps=np.int32(4))
    assert type(cfg.block_m) is int and type(cfg.num_warps) is int
    assert cfg == GemmConfig(block_m=64, num_warps=4)  # one compile-cache key, not two
    with pytest.raises(ValueError, match="GemmConfig: num_stages must be an int >= 1, got True"):
        GemmConfig(num_stages=True)
    with pytest.raises(ValueError, match="copy_engine: lanes must be a positive int, got True"):
        CopyEngine(lanes=True)
    with pytest.raises(ValueError, match="ditron.launch: world_size must be a positive int, "
                                         "got True"):
        ditron.launch(len, True)  # was one rank


def _rank_case() -> list[str]:
    w = ditron.world()
    other = np.int64((w.rank + 1) % w.world_size)
    buf = ditron.zeros(np.int64(4), torch.float32)
    assert buf.shape == (4,) and ditron.peer(buf, other).shape == (4,)
    assert ditron.signal_pad("test.integers", np.int16(3)).signals.numel() >= 3
    layer = ditron.nn.ColumnParallelLinear(np.int64(8), np.int64(4 * w.world_size))
    assert type(layer.in_features) is int and type(layer.out_features) is int
    W = w.world_size
    rows = torch.randn(2 * W, 3)
    for splits in (np.full(W, 2), torch.full((W,), 2)):
        assert torch.equal(ditron.ops.all_to_all(rows, splits, splits),
                           ditron.ops.all_to_all(rows))
    if W == 2:  # point-to-point with the peer named by a NumPy integer
        mine = torch.arange(6.0).view(2, 3) + w.rank
        if w.rank == 0:
            ditron.ops.send(mine, other)
            got = ditron.ops.recv(np.array([2, 3]), other)
        else:
            got = ditron.ops.recv(np.array([2, 3]), other)
            ditron.ops.send(mine, other)
        assert torch.equal(got, torch.arange(6.0).view(2, 3) + int(other))
    a = torch.randn(2, 8)
    bad_calls = [  # (what the error must say, the call)
        ("ditron.peer: rank must be an int, got True", lambda: ditron.peer(buf, True)),
        ("shape must be an int or a sequence of ints, got (True, 2)",
         lambda: ditron.zeros((True, 2), torch.float32)),
        ("ag_gemm: chunk_rows must be a positive int, got True",
         lambda: ditron.ops.ag_gemm(a, torch.randn(8, 4), chunk_rows=True)),
        ("gemm_rs: chunk_rows as a sequence", lambda: ditron.ops.gemm_rs(
            torch.randn(2 * W, 8), torch.randn(8, 4), chunk_rows=(True, 1))),
        ("moe_dispatch: max_tokens must be an int >= this rank's 1 tokens, got True",
         lambda: ditron.ops.moe_dispatch(torch.randn(1, 8), torch.zeros(1, 1, dtype=torch.int64),
                                         W, max_tokens=True)),
        (f"num_experts must be a positive multiple of the world size {W}, got {2.0 * W}",
         lambda: ditron.nn.ExpertParallelMLP(8, 4, 2.0 * W)),
        ("ditron.nn: in_features must be a positive int, got 8.0",
         lambda: ditron.nn.RowParallelLinear(8.0, 4)),
        ("all_gather: dim must be an int, got True",
         lambda: ditron.ops.all_gather(rows, dim=True)),
        (f"all_to_all: in_splits must be {W} non-negative int sizes",
         lambda: ditron.ops.all_to_all(rows, [2.5] + [2] * (W - 2) + [1.5] if W > 1 else [2.0])),
        ("recv: a size of the shape must be an int >= 0, got 2.5",
         lambda: ditron.ops.recv((2.5, 3), w.rank)),
        ("all_to_all_device: max_out_rows must be an int >= 0, got 2.5",
         lambda: ditron.ops.all_to_all_device(rows, torch.full((W,), 2), 2.5))]
    said = []
    for expected, call in bad_calls:
        try:
            call()
            said.append((expected, "accepted"))
        except (TypeError, ValueError) as exc:
            said.append((expected, str(exc)))
    return said


@pytest.mark.parametrize("world_size", [1, 2])
def test_public_calls_take_numpy_ints_and_refuse_the_rest(world_size):
    for said in ditron.launch(_rank_case, world_size, backend="cpu"):
        wrong = [(expected, got) for expected, got in said if expected not in got]
        assert not wrong, wrong
