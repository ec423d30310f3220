"""README's first kernel and docs/moe.md's Mixtral block run as printed (as scripts, on
the backend under test)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_section(page: str, heading: str, tmp_path: Path, backend: str):
    """The first Python block after ``heading`` in ``page``, run as a script; the last line
    it prints, as a Python literal."""
    text = (ROOT / page).read_text()
    start = text.index(heading)
    code = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    script = tmp_path / "section.py"
    script.write_text(code)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # a user's shell: this process has the interpreter on for its own CPU-backend kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path,
                         env={**env, "PYTHONPATH": path, "DITRON_BACKEND": backend})
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_readme_first_kernel(tmp_path, backend):
    """Every rank reads its left neighbour's rank."""
    got = _run_section("README.md", "## A first kernel", tmp_path, backend)  # a list per rank
    assert got == [[float((r - 1) % 4)] * 16 for r in range(4)]


def test_moe_doc_mixtral_block(tmp_path, backend):
    """The expert-parallel layer equals the model's own experts on each rank's tokens, and
    the backward reaches the router."""
    got = _run_section("docs/moe.md", "## A Mixtral block, end to end", tmp_path, backend)
    assert len(got) == 2
    for err, router_grad in got:
        assert err < 1e-4 and router_grad is True, got
