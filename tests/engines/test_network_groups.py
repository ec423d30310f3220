"""The network engine's choice of process group (``engines/network.py``), with the world's
groups stood in for: both ends of a transfer see only their own side's tensor, so the group
must follow from the world alone. The CPU backend's worlds are gloo only; this is the rule
a GPU world with an NCCL device group takes."""

from __future__ import annotations

import types

import pytest
import torch

from ditron.engines import network


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_both_ends_pick_one_group_whatever_their_devices(monkeypatch, backend):
    gpu = torch.device("cuda", 0)
    groups = types.SimpleNamespace(device_backend=backend, device="device group",
                                   host="host group")
    world = types.SimpleNamespace(groups=groups, world=types.SimpleNamespace(device=gpu))
    monkeypatch.setattr(network, "current", lambda: world)
    engine = network.NetworkEngine()
    on_host = torch.zeros(3)  # e.g. a receiver's dst in host memory
    on_gpu = types.SimpleNamespace(is_cuda=True)  # the sender's src on its GPU
    # before: an NCCL world sent a CUDA src over NCCL and received into a host dst over
    # gloo; the send and the receive never met (both ranks hung at drain)
    if backend == "nccl":
        assert engine._group(on_gpu) == ("device group", None)
        assert engine._group(on_host) == ("device group", gpu)  # staged through the GPU
    else:
        assert engine._group(on_gpu) == ("host group", torch.device("cpu"))
        assert engine._group(on_host) == ("host group", None)
