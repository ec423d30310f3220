"""Stream-ordered signal kernels shared by the engines and the collectives.

``notify_peers`` raises one slot of a pad on a range of peers (release, system scope);
``wait_slots`` waits until a range of the local pad's slots reach a value (acquire). Both
are tiny Triton launches, so on CUDA they are ordered in the current stream and the host
never blocks; on the CPU backend they run synchronously.
"""

from __future__ import annotations

import triton
import triton.language as tl  # noqa: F401 - the interpreter patches kernels through it

from .. import language as dl
from ..runtime.signals import SignalPad
from ..runtime.world import current


@triton.jit
def notify_range(sig_ptr, slot, value, first, count, skip, ctx):
    """Raise slot ``slot`` to ``value`` on ranks ``first .. first + count - 1`` but ``skip``
    (callable from kernels: device-side values)."""
    for i in range(0, count):
        if first + i != skip:
            dl.notify(sig_ptr + slot, value, first + i, ctx)


@triton.jit
def wait_range(sig_ptr, base, first, count, skip, value, ctx):
    """Wait until local slots ``base + r`` (``r`` in ``first .. first + count - 1``, ``r !=
    skip``) reach ``value`` (callable from kernels)."""
    for i in range(0, count):
        if first + i != skip:
            dl.wait(sig_ptr + base + first + i, value, ctx)


def notify_peers(pad: SignalPad, slot: int, value: int, peers: range, skip: int = -1) -> None:
    """Set slot ``slot`` of ``pad`` to ``value`` on every rank in ``peers`` except ``skip``."""
    if len(peers) == 0 or (len(peers) == 1 and peers[0] == skip):
        return
    notify_range[(1,)](pad.signals, slot, value, peers.start, len(peers), skip,
                        current().context())


def wait_slots(pad: SignalPad, base: int, ranks: range, value: int, skip: int = -1) -> None:
    """Wait until local slots ``base + r`` (``r`` in ``ranks``, ``r != skip``) are >= ``value``."""
    if len(ranks) == 0 or (len(ranks) == 1 and ranks[0] == skip):
        return
    wait_range[(1,)](pad.signals, base, ranks.start, len(ranks), skip, value,
                      current().context())
