"""Every ``ditron.…`` name the README, docs/ and the package's own docstrings mention
exists (``torch.ops.ditron.…``: a registered custom op), and every command the pages print
names a script and options that exist, so a rename cannot leave a page or a docstring
pointing at nothing."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
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


#: a command in a page: ``ditron bench NAME`` / ``ditron trace|demo|info`` (as ``python -m
#: ditron ...`` too) or a script run by ``python`` / ``bash``, and the rest of its line
CLI = re.compile(r"(?<![\w.-])ditron (bench [a-z][\w-]*|trace|demo|info)\b(.*)")
SCRIPT = re.compile(r"(?:python3?|bash) ((?:bench|tools)/[\w./-]+\.(?:py|sh))(.*)")
#: a script named without its folder (``check_ops_at_scale.py --only tp``): one of these
BARE = re.compile(r"(?<![\w/.-])([\w-]+\.py)( .*)")
SCRIPT_DIRS = ("bench", "bench/diag", "tools")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def _commands(text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each inline code span and each line of a fenced block."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            continue
        found += [(lineno, span) for span in re.findall(r"`([^`]+)`", line)]
    for block in re.finditer(r"```(?:bash|sh)?\n(.*?)```", text, re.S):
        first = text[:block.start()].count("\n") + 2
        found += [(first + i, line) for i, line in enumerate(block.group(1).splitlines())]
    return found


@functools.cache
def _cli_help(command: str) -> str:
    """``python -m ditron COMMAND --help``, run in this process."""
    from ditron import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main([*command.split(), "--help"])
    return out.getvalue()


def _script_options(path: Path) -> str:
    """The source a script's options are in: its own, or the ``ditron bench`` help of the
    benchmark module it forwards to (``bench/megakernel.py``)."""
    source = path.read_text()
    for module in re.findall(r"ditron\.benchmarks\.(\w+) import main", source):
        source += _cli_help(f"bench {module.replace('_', '-')}")
    return source


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_commands_on_page_exist(page):
    """``ditron`` subcommands and ``bench/`` / ``tools/`` scripts exist and take the options
    the page gives them (docs/perf.md's commands included: they are how its figures are
    reproduced)."""
    wrong = []
    for lineno, span in _commands(page.read_text()):
        if m := CLI.search(span):
            help_text = _cli_help(m.group(1))
            if not help_text:
                wrong.append(f"{lineno}: no command `ditron {m.group(1)}`")
                continue
            wrong += [f"{lineno}: `ditron {m.group(1)}` has no {flag}"
                      for flag in FLAG.findall(m.group(2)) if flag not in help_text]
        scripts = [(m.group(1), m.group(2)) for m in SCRIPT.finditer(span)]
        if not scripts and (m := BARE.search(span)):  # in a folder of scripts, if any
            scripts = [(f"{d}/{m.group(1)}", m.group(2)) for d in SCRIPT_DIRS
                       if (ROOT / d / m.group(1)).is_file()][:1]
        for name, rest in scripts:
            path = ROOT / name
            if not path.is_file():
                wrong.append(f"{lineno}: no script {name}")
                continue
            source = _script_options(path) if path.suffix == ".py" else path.read_text()
            wrong += [f"{lineno}: {name} has no {flag}"
                      for flag in FLAG.findall(rest) if flag not in source]
    assert not wrong, f"{page.name}: " + "; ".join(wrong)


#: a dotted name in a page's code span: ``chunked_exchanges.PULL_LANES``, ``plan.deps``
DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
#: the pages' local variables whose methods they name (``graph.compile()``), by class
LOCALS = {"graph": ("ditron.task.graph.TaskGraph", "torch.cuda.CUDAGraph"),
          "plan": ("ditron.plan.ir.Plan",)}


def _modules_by_suffix() -> dict[str, list[str]]:
    """Each module of ``ditron`` under every dotted suffix of its name (``gemm``,
    ``kernels.gemm``, ``ditron.kernels.gemm``)."""
    found: dict[str, list[str]] = {}
    for path in SOURCES:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        for i in range(len(parts)):
            found.setdefault(".".join(parts[i:]), []).append(".".join(parts))
    return found


def _attribute_path(obj: object, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _bare_missing(text: str) -> set[str]:
    """Names like ``exchange.ACK_BY_DATA`` (a module of ``ditron`` named without its
    package, then attributes) that do not resolve; ``nn.Linear`` may be torch's."""
    import torch

    modules = _modules_by_suffix()
    missing = set()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks: their own variables
    for span in re.findall(r"`([^`]+)`", prose):
        for dotted in DOTTED.findall(span):
            parts = dotted.split(".")
            if parts[0] in ("ditron", "torch", "tl", "dist", "triton") \
                    or parts[-1] in ("py", "md", "json", "sh", "png"):
                continue  # checked above, another package's, or a file
            split = next((k for k in range(len(parts), 0, -1)
                          if ".".join(parts[:k]) in modules), 0)
            if not split:
                continue  # not a name of the package
            # (an object, the attributes the name takes from it)
            owners = [(importlib.import_module(m), parts[split:])
                      for m in modules[".".join(parts[:split])]]
            if parts[0] == "nn":
                owners.append((torch.nn, parts[1:]))
            for cls in LOCALS.get(parts[0], ()):
                module, _, name = cls.rpartition(".")
                owners.append((getattr(importlib.import_module(module), name), parts[1:]))
            if not any(_attribute_path(obj, names) for obj, names in owners):
                missing.add(dotted)
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_module_names_on_page_exist(page):
    """``chunked_exchanges.PULL_LANES``, ``engines.sync.bump``: a module named without
    ``ditron.`` and what the page says is in it (``test_names_on_page_exist`` checks the
    names that start with ``ditron.``)."""
    missing = _bare_missing(page.read_text())
    assert not missing, f"{page.name} names what does not exist: {sorted(missing)}"


#: a file named by its path (``ops/replays.py``, ``tests/ops/test_views.py``), from the
#: repository, the package or docs/ (``images/x.png``)
FILE_PATH = re.compile(r"(?<![\w./~$-])((?:[\w-]+/)+[\w.-]+\.(?:py|sh|md|json|png|txt))\b")
#: a file named alone (``replays.py``, in docs/developing.md's layer list)
FILE_NAME = re.compile(r"(?<![\w./-])([\w-]+\.(?:py|sh))\b")
#: a test function named in backquotes
TEST_NAME = re.compile(r"`(test_\w+)`")


def _repository_files() -> set[str]:
    """The names of the files of the package, the tests, the benchmarks and the tools (the
    recorded runs under bench/results left out)."""
    return {p.name for d in ("ditron", "tests", "bench", "tools") for p in (ROOT / d).rglob("*")
            if "results" not in p.relative_to(ROOT).parts}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_files_on_page_exist(page):
    """Every file a page points a reader to (a module, a test file, a script, an image)
    exists, so a moved or renamed file cannot leave the page pointing at nothing."""
    text = page.read_text()
    bases = (ROOT, ROOT / "ditron", ROOT / "docs")
    missing = {path for path in FILE_PATH.findall(text)
               if not any((base / path).exists() for base in bases)}
    names = _repository_files()
    missing |= {name for name in FILE_NAME.findall(text) if name not in names}
    assert not missing, f"{page.name} names files that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_tests_on_page_exist(page):
    """A test a page cites as evidence (``test_tp_gemms_survive_a_failed_launch``) is one of
    the suite's, not a name a rename left behind."""
    defined = {m for path in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M)}
    missing = set(TEST_NAME.findall(page.read_text())) - defined
    assert not missing, f"{page.name} cites tests that do not exist: {sorted(missing)}"
