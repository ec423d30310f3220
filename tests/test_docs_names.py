"""Every ``ditron.…`` name the README and docs/ mention exists (``torch.ops.ditron.…``: a
registered custom op), so a rename cannot leave the pages pointing at nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name != "perf.md")]  # perf.md: a dated log
NAME = re.compile(r"(torch\.ops\.)?\bditron((?:\.[A-Za-z_]\w*)+)")


def _resolves(parts: list[str]) -> bool:
    for split in range(len(parts), 0, -1):  # the longest importable module prefix
        try:
            obj = importlib.import_module(".".join(parts[:split]))
            break
        except ImportError:
            continue
    for attr in parts[split:]:
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_names_on_page_exist(page):
    import torch

    import ditron.nn  # noqa: F401  (registers torch.ops.ditron)

    missing = set()
    for custom_op, dotted in NAME.findall(page.read_text()):
        parts = dotted.lstrip(".").split(".")
        if parts[-1] in ("py", "md", "json"):  # a file name such as ditron/ops/foo.py
            continue
        if custom_op:
            found = hasattr(torch.ops.ditron, parts[0])
        else:
            found = _resolves(["ditron", *parts])
        if not found:
            missing.add(("torch.ops." if custom_op else "") + "ditron." + ".".join(parts))
    assert not missing, f"{page.name} names what does not exist: {sorted(missing)}"
