"""A tuned decision serves only calls that run what was timed: ``DITRON_GEMM_TMA`` (which
load path the GEMMs take) and, on GPUs, debug mode (``ditron.set_wait_timeout``) are part
of its key, and ``method="auto"``'s in-process memo of a decision follows them: a change
made on every rank is decided again, on every rank alike."""

from __future__ import annotations

import dataclasses
import os
import types

import pytest
import torch

import ditron
from ditron.kernels import descriptors
from ditron.tune import cache, decisions

from .counted_tuning import tune_counting

M, N, K = 8, 12, 16


def _put_overlap(directory: str) -> None:
    """Rank 0 caches an overlapped decision for ``gemm_rs`` ``M x N x K`` (fp32) under the
    key this process makes now; every rank then waits for the write."""
    from ditron.ops import tp_gemm

    os.environ["DITRON_CACHE_DIR"] = directory
    cfg = tp_gemm.default_config(ditron.world().device, torch.float32)
    if ditron.world().rank == 0:
        cache.put(decisions.key_for("gemm_rs", M, N, K, torch.float32, 2),
                  dataclasses.asdict(decisions.Decision("overlap", cfg, "copy_engine_pull")))
    ditron.barrier()


def _tuned(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``auto`` takes the cached decision for ``a @ b`` now."""
    from ditron.ops import tp_gemm

    return tp_gemm._choose("gemm_rs", "auto", M, a, b, None).tuned


def _tma_case(directory: str) -> list:
    os.environ["DITRON_GEMM_TMA"] = "1"  # the interpreter emulates TMA descriptors
    _put_overlap(directory)
    g = torch.Generator().manual_seed(ditron.world().rank)
    a, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g).t()
    seen = []
    for tma in ("1", "0", "", "1"):
        os.environ["DITRON_GEMM_TMA"] = tma
        seen.append(_tuned(a, b))
    # and the op runs the decision it took (the pulled copy engine), right
    from ditron.runtime.world import current

    out = ditron.ops.gemm_rs(a, b)
    want = a @ b
    torch.distributed.all_reduce(want, group=current().host_group)
    want = want.chunk(2)[ditron.world().rank]
    return [seen, torch.allclose(out, want, rtol=1e-5, atol=1e-5)]


def test_a_decision_timed_with_tma_loads_serves_only_them(tmp_path):
    """A decision timed with ``DITRON_GEMM_TMA=1`` (other kernels than the default's) was
    read under the same key with it off, and once taken in a process it was kept after
    the switch changed; now each load path reads its own entry, and ``auto`` decides
    again when the switch changes (on every rank alike: no rank waits for another)."""
    got = ditron.launch(_tma_case, 2, str(tmp_path), backend="cpu")
    assert got == [[[True, False, False, True], True]] * 2


def _debug_case(directory: str) -> list:
    from ditron.runtime import world

    # a GPU world's rule (the CPU backend checks every launch, and its keys do not say so)
    decisions._checked_calls = lambda *_: world.current().wait_timeout > 0
    ditron.set_wait_timeout(30)
    _put_overlap(directory)  # under the "checked calls" key
    a, b = torch.randn(M, K), torch.randn(N, K).t()
    seen = []
    for timeout in (30, 0, 30):
        ditron.set_wait_timeout(timeout)
        seen.append(_tuned(a, b))
    ditron.set_wait_timeout(30)  # for the world's own checks on the way out
    return seen


def test_auto_decides_again_when_debug_mode_changes(tmp_path, monkeypatch):
    """On a GPU a wait timeout adds a device synchronize after every overlapped launch, and
    the key says ``checked calls``; ``ditron.set_wait_timeout`` after the first call left
    ``auto`` with the decision of the other mode."""
    monkeypatch.setenv("DITRON_CHECK_CALLS", "0")
    got = ditron.launch(_debug_case, 2, str(tmp_path), backend="cpu")
    assert got == [[True, False, True]] * 2


def _runtime(device: torch.device) -> types.SimpleNamespace:
    world = types.SimpleNamespace(device=device, local_world_size=2, world_size=2)
    return types.SimpleNamespace(world=world, wait_timeout=0.0,
                                 settings=types.SimpleNamespace(check_calls=False),
                                 backend=types.SimpleNamespace(shares_devices=lambda n: False))


@pytest.mark.parametrize(("device", "capability", "expected"), [
    ("cuda", (9, 0), {"": "", "0": "pointer loads", "1": ""}),
    ("cuda", (8, 0), {"": "", "0": "", "1": ""}),  # no TMA: pointers whatever is asked
    ("cpu", None, {"": "", "0": "", "1": "TMA loads"}),
])
def test_keys_name_a_load_path_other_than_the_devices_own(device, capability, expected,
                                                          monkeypatch):
    """The key says how the GEMMs load where ``DITRON_GEMM_TMA`` departs from the device's
    default (TMA from capability 9, pointers elsewhere); the default adds nothing (keys
    cached before)."""
    from ditron.runtime import world

    dev = torch.device(device, 0) if device == "cuda" else torch.device("cpu")
    if capability is not None:
        monkeypatch.setitem(descriptors._CAPABILITY, 0, capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(world, "is_initialized", lambda: True)
    monkeypatch.setattr(world, "current", lambda: _runtime(dev))
    name = "NVIDIA H200" if device == "cuda" else "cpu"
    for value, path in expected.items():
        monkeypatch.setenv("DITRON_GEMM_TMA", value)
        key = decisions.key_for("gemm_rs", 64, 32, 16, torch.bfloat16, 2, "n")
        variant = ", ".join(v for v in ("b row-major", path) if v)
        assert key == f"gemm_rs|64x32x16|bfloat16|w2|{name}|{variant}{cache.versions()}"


def test_a_malformed_load_switch_is_refused_before_tuning(tmp_path):
    """``DITRON_GEMM_TMA`` names the decision's key, which rank 0 makes after the timing:
    a value it cannot read is refused on every rank before anything is timed (rank 0
    raising alone at its write left its peers waiting)."""
    got = ditron.launch(tune_counting, 2, str(tmp_path), {"DITRON_GEMM_TMA": "2"},
                        backend="cpu")
    assert got == [("SettingsError: DITRON_GEMM_TMA must be 0 or 1 (or off / on), got '2'",
                    0)] * 2
