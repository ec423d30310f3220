"""Running a script as a job of ranks started by torchrun (``torch.distributed.run``) on
this machine, on the CPU backend, as a user's training job starts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_under_torchrun(script: Path, ranks: int) -> subprocess.CompletedProcess:
    """Run ``script`` as ``ranks`` processes under torchrun (4 minutes at most); its
    output and exit status (torchrun's: 0 when every rank exited with 0)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "DITRON_RECORD_LAUNCHES")}
    env["DITRON_BACKEND"] = "cpu"
    return subprocess.run(
        # --standalone: torchrun binds its store to a port of the system's choosing and
        # hands it to the ranks. A port picked here beforehand (bound, released, passed as
        # --master-port) could be taken meanwhile by any process binding port 0, such as
        # the gloo groups of a test running beside this one: EADDRINUSE
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(ranks), str(script)],
        capture_output=True, text=True, env=env, timeout=240)
