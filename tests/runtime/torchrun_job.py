"""Running a script as a job of ranks started by torchrun (``torch.distributed.run``) on
this machine, on the CPU backend, as a user's training job starts them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_under_torchrun(script: Path, ranks: int) -> subprocess.CompletedProcess:
    """Run ``script`` as ``ranks`` processes under torchrun (4 minutes at most); its
    output and exit status (torchrun's: 0 when every rank exited with 0)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "DITRON_RECORD_LAUNCHES")}
    env["DITRON_BACKEND"] = "cpu"
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
        capture_output=True, text=True, env=env, timeout=240)
