"""Run a script in a Python of its own whose ``ditron`` imports as the cuda backend, without
a GPU (the scripts compile kernels for sm_90 through ``tools/cuda_compile_check.py``'s
stand-in driver), and read the JSON its last line prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: the repository's root, put on the script's path and given as its first argument
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_as_cuda(source: str, *args: str, file: Path | None = None) -> object:
    """Run ``source`` (from ``file``, written first, where it defines ``@triton.jit``
    kernels: they need a source file; else with ``python -c``) with ``ROOT`` and ``args`` as
    its arguments; its exit status must be 0. Returns its last line of output, parsed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["DITRON_BACKEND"] = "cuda"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    if file is not None:
        file.write_text(source)
        command = [sys.executable, str(file)]
    else:
        command = [sys.executable, "-c", source]
    proc = subprocess.run([*command, ROOT, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
