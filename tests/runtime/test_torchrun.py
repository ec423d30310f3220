"""``ditron.init()`` inside ranks started by torchrun (the contract's other entry point)."""

from __future__ import annotations

from .torchrun_job import run_under_torchrun

SCRIPT = """
import torch
import ditron
import ditron.language as dl
import triton
import triton.language as tl


@triton.jit
def to_right(buf, sig, epoch, n, BLOCK: tl.constexpr, ctx):
    right = (ctx.rank + 1) % ctx.world_size
    dl.put(buf + n, buf, n, right, ctx, BLOCK)
    dl.notify(sig, epoch, right, ctx)
    dl.wait(sig, epoch, ctx)


w = ditron.init()
buf = ditron.zeros((2 * 10,), torch.float32)
buf[:10] = w.rank + 1
pad = ditron.signal_pad("torchrun", 1)
for _ in range(2):
    to_right[(1,)](buf, pad.signals, pad.next_epoch(), 10, BLOCK=16, ctx=ditron.context())
ditron.check_waits()
print(f"rank {w.rank}/{w.world_size} got {buf[10:].tolist()}", flush=True)
ditron.shutdown()
"""


def test_init_under_torchrun(tmp_path):
    script = tmp_path / "ring.py"
    script.write_text(SCRIPT)
    out = run_under_torchrun(script, 3)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in range(3):
        left = (rank - 1) % 3
        assert f"rank {rank}/3 got {[float(left + 1)] * 10}" in out.stdout
