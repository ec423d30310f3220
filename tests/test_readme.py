"""README's first kernel runs as printed (as a script, on the backend under test): every
rank reads its left neighbour's rank."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_first_kernel(tmp_path, backend):
    text = (ROOT / "README.md").read_text()
    start = text.index("## A first kernel")
    code = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    script = tmp_path / "first_kernel.py"
    script.write_text(code)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # a user's shell: this process has the interpreter on for its own CPU-backend kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path,
                         env={**env, "PYTHONPATH": path, "DITRON_BACKEND": backend})
    assert out.returncode == 0, out.stderr
    got = ast.literal_eval(out.stdout.strip().splitlines()[-1])  # one list per rank
    assert got == [[float((r - 1) % 4)] * 16 for r in range(4)]
