"""``lowering.publish`` reaches only ranks whose heaps are mapped: peers past the world or
on another (simulated) node are refused by name before the launch; the publish kernel
translated their addresses through missing heap bases and the rank died (SIGSEGV)."""

from __future__ import annotations

import torch

import ditron
from ditron.plan import lowering


def _publish(peers: range) -> tuple[str, list[int]]:
    pad = ditron.signal_pad("test.plan.publish_peers", 4)
    ditron.barrier()
    ids = torch.tensor([1, 3], dtype=torch.int32, device=pad.signals.device)
    try:
        lowering.publish(pad.signals, ids, 7, peers, ditron.context())
        error = ""
    except ValueError as exc:
        error = str(exc)
    ditron.barrier()
    return error, [int(s) for s in pad.signals[:4]]


def test_publish_refuses_peers_outside_the_world(backend):
    results = ditron.launch(_publish, 2, range(0, 3), backend=backend)
    for error, signals in results:
        assert error.startswith("publish: peers range(0, 3) reach past this rank's node "
                                "range(0, 2)"), error
        assert signals == [0, 0, 0, 0]


def test_publish_refuses_peers_on_another_node(backend, monkeypatch):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")  # nodes {0, 1} and {2, 3}
    results = ditron.launch(_publish, 4, range(0, 4), backend=backend)
    for rank, (error, signals) in enumerate(results):
        node = "range(0, 2)" if rank < 2 else "range(2, 4)"
        assert error.startswith(f"publish: peers range(0, 4) reach past this rank's node "
                                f"{node}"), error
        assert signals == [0, 0, 0, 0]


def test_publish_raises_the_chunks_on_every_peer_of_the_node(backend):
    results = ditron.launch(_publish, 3, range(0, 3), backend=backend)
    assert results == [("", [0, 7, 0, 7])] * 3


def _publish_ids() -> tuple[list[str], list[int]]:
    pad = ditron.signal_pad("test.plan.publish_ids", 4)
    n = pad.signals.numel()
    ditron.barrier()
    w = ditron.world()
    ctx, peers = ditron.context(), range(w.world_size)
    ids = torch.tensor([1, 3], dtype=torch.int32, device=pad.signals.device)
    errors = []
    lowering.publish(pad.signals, ids, 5, peers, ctx)  # checked and remembered
    for bad in ([1, n], [-1, 2]):
        ids.copy_(torch.tensor(bad, dtype=torch.int32))  # in place: read again
        try:
            lowering.publish(pad.signals, ids, 6, peers, ctx)
            errors.append("")
        except ValueError as exc:
            errors.append(str(exc))
    on = pad.signals.device  # the refusals of shape and strides, not of the device
    for wrong in (ids.long(), torch.tensor([[1, 3]], dtype=torch.int32, device=on),
                  torch.tensor([1, 2, 3], dtype=torch.int32, device=on)[::2]):
        try:
            lowering.publish(pad.signals, wrong, 6, peers, ctx)
            errors.append("")
        except ValueError as exc:
            errors.append(str(exc))
    ditron.barrier()
    return errors, [int(s) for s in pad.signals[:4]]


def test_publish_refuses_chunk_ids_outside_the_pad(backend):
    """An id past the pad was raised in the heap memory after the pad on every peer."""
    for world_size in (1, 2):
        for errors, signals in ditron.launch(_publish_ids, world_size, backend=backend):
            assert signals == [0, 5, 0, 5]
            assert "chunk ids must be slots of the pad" in errors[0], errors
            assert "got ids from 1 to" in errors[0] and "from -1 to 2" in errors[1], errors
            assert all("must be a contiguous 1-D int32 tensor" in e for e in errors[2:]), errors
