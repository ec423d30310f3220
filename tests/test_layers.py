"""The package's imports point down the layers of docs/developing.md, lazy ones included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ditron"

#: each unit of ``ditron`` (a subpackage or a top-level module) and its layer; a unit may
#: import units of lower layers only
LAYERS = {
    "language": 0,
    "runtime": 1,
    "engines": 2, "kernels": 2,
    "plan": 3, "tune": 3, "trace": 3,
    "ops": 4,
    "nn": 5, "task": 5,
    "benchmarks": 6, "demo": 6, "__init__": 6,
    "cli": 7, "__main__": 8,
}

#: the imports up the layers there are, and why
EXCEPTIONS = {
    # tune.tuner.tune measures the op it tunes; benchmarks, tests and users call it, the ops
    # only read its cached decisions
    ("tune/tuner.py", "ops"),
}


def _imported_units(module: str, source: str) -> set[tuple[str, int]]:
    """``(unit, line)`` for each import of a unit of ``ditron`` in the source of ``module``
    (its dotted name below ``ditron``, e.g. ``"ops.tp_gemm"``; ``"ops"`` for
    ``ops/__init__.py``), at any depth of the code."""
    package = module.split(".") if module in _PACKAGES else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name.removeprefix("ditron.") for a in node.names
                       if a.name.startswith("ditron.")]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            targets = _targets(base, node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ditron":
            targets = _targets([], ast.ImportFrom(module=node.module.partition(".")[2] or None,
                                                  names=node.names))
        else:
            continue
        found |= {(top, node.lineno) for t in targets if (top := t.split(".")[0]) in LAYERS}
    return found


def _targets(base: list[str], node: ast.ImportFrom) -> list[str]:
    """The dotted names below ``ditron`` that ``from <base>.<module> import names`` reads."""
    prefix = ".".join([*base, *([node.module] if node.module else [])])
    return [prefix] if prefix else [a.name for a in node.names]


#: dotted names of the subpackages (a module named so is its ``__init__.py``)
_PACKAGES = {".".join(p.relative_to(PACKAGE).parent.parts) for p in PACKAGE.rglob("__init__.py")}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = p
    return out


def test_every_unit_has_a_layer():
    units = {name.split(".")[0] for name in _modules()}
    assert units <= set(LAYERS), f"give these a layer in LAYERS: {sorted(units - set(LAYERS))}"


def test_imports_point_down_the_layers():
    upward = []
    for name, path in sorted(_modules().items()):
        me = name.split(".")[0]
        for unit, line in _imported_units(name, path.read_text()):
            rel = path.relative_to(PACKAGE).as_posix()
            if unit != me and LAYERS[unit] >= LAYERS[me] and (rel, unit) not in EXCEPTIONS:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {me} imports {unit}")
    assert not upward, "imports across or up the layers:\n" + "\n".join(sorted(upward))


def test_the_check_reads_relative_lazy_and_absolute_imports():
    source = ("def f():\n    from ..ops.graphs import capture\n"
              "from .. import trace\nfrom . import cache\nimport ditron.nn.linear\n"
              "from ditron.task import graph\n")
    assert {u for u, _ in _imported_units("tune.tuner", source)} == {"ops", "trace", "tune",
                                                                     "nn", "task"}
    assert {u for u, _ in _imported_units("tune", "from ..runtime import world\n"
                                                  "from .tuner import tune\n")} == \
        {"tune", "runtime"}
