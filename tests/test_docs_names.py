"""Every ``ditron.…`` name the README, docs/ and the package's own docstrings mention
exists (``torch.ops.ditron.…``: a registered custom op), so a rename cannot leave a page or
a docstring pointing at nothing."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name != "perf.md")]  # perf.md: a dated log
SOURCES = sorted((ROOT / "ditron").rglob("*.py"))
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


def _missing(text: str) -> set[str]:
    import torch

    import ditron.nn  # noqa: F401  (registers torch.ops.ditron)

    missing = set()
    for match in NAME.finditer(text):
        custom_op, dotted = match.groups()
        parts = dotted.lstrip(".").split(".")
        if parts[-1] in ("py", "md", "json") or text[match.end():match.end() + 1] == "*":
            continue  # a file name (ditron/ops/foo.py), or a family (torch.ops.ditron.moe_*)
        if custom_op:
            found = hasattr(torch.ops.ditron, parts[0])
        else:
            found = _resolves(["ditron", *parts])
        if not found:
            missing.add(match.group(0))
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_names_on_page_exist(page):
    missing = _missing(page.read_text())
    assert not missing, f"{page.name} names what does not exist: {sorted(missing)}"


def test_names_in_docstrings_exist():
    missing = {f"{path.relative_to(ROOT)}: {name}" for path in SOURCES
               for name in _missing(path.read_text())}
    assert not missing, f"the package names what does not exist: {sorted(missing)}"


def test_public_ops_show_their_parameters():
    """``help(ditron.ops.x)`` and ``inspect`` show each op's own parameters and docstring,
    not a forwarding ``(*args, **kw)`` (``all_to_all_device`` was one)."""
    import inspect

    import ditron.ops

    for name in ditron.ops.__all__:
        op = getattr(ditron.ops, name)
        if not inspect.isfunction(op):
            continue
        kinds = {p.kind for p in inspect.signature(op).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds or inspect.Parameter.VAR_POSITIONAL \
            not in kinds, f"ditron.ops.{name}{inspect.signature(op)}"
        assert op.__doc__ and not op.__doc__.startswith("See "), name
