"""Claims of the pages that the code can check cheaply: docs/language.md's table of
primitives has each primitive's parameters, in order, with the code's defaults, and
docs/settings.md gives the defaults the code has."""

from __future__ import annotations

import ast
import inspect
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _first_column(page: str) -> list[str]:
    """The first cell of every row of the page's tables (header and rule rows left out)."""
    cells = []
    for line in (ROOT / page).read_text().splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells.append(line.split("|")[1].strip())
    return cells[1:] if cells else cells


#: ``name(params)`` in a cell; ``a / b / c(params)`` names several with one signature
SIGNATURE = re.compile(r"`((?:\w+ / )*\w+)\(([^)]*)\)")


def _documented_primitives() -> dict[str, list[str]]:
    found = {}
    for cell in _first_column("docs/language.md"):
        for names, params in SIGNATURE.findall(cell):
            for name in names.split(" / "):
                found[name] = [p.strip() for p in params.split(",") if p.strip()]
    return found


def test_language_table_names_every_primitive():
    import ditron.language as dl

    primitives = {name for name in dl.__all__ if hasattr(getattr(dl, name), "fn")}
    assert set(_documented_primitives()) == primitives


@pytest.mark.parametrize("name", sorted(_documented_primitives()))
def test_language_table_signatures(name):
    """Each parameter in the code's order; a default the page gives is the code's (a page
    parameter ``sig`` is the code's ``sig_ptr``)."""
    import ditron.language as dl

    code = list(inspect.signature(getattr(dl, name).fn).parameters.values())
    page = _documented_primitives()[name]
    assert len(page) == len(code), f"{name}: page {page}, code {[p.name for p in code]}"
    for text, param in zip(page, code, strict=True):
        pname, _, default = text.partition("=")
        assert pname.strip() in (param.name, param.name.removesuffix("_ptr"),
                                 param.name.replace("_ptrs", "s")), (name, text, param)
        if default:
            value = param.default
            value = getattr(value, "value", value)  # a tl.constexpr default
            assert ast.literal_eval(default.strip()) == value, (name, text, param)


def _settings_defaults() -> dict[str, str]:
    rows = {}
    for line in (ROOT / "docs/settings.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and (m := re.fullmatch(r"`(DITRON_\w+)`", cells[0])):
            rows[m.group(1)] = cells[1]
    return rows


def _flag_defaults() -> dict[str, bool]:
    """Each ``env_flag("DITRON_X"[, default])`` of the package, with its default."""
    found = {}
    call = re.compile(r"env_flag\(\"(DITRON_\w+)\"(?:, (True|False))?\)")
    for path in (ROOT / "ditron").rglob("*.py"):
        for name, default in call.findall(path.read_text()):
            found[name] = default == "True"
    return found


@pytest.mark.parametrize("name", sorted(_flag_defaults()))
def test_settings_page_gives_each_switch_its_default(name):
    assert _settings_defaults()[name] == ("on" if _flag_defaults()[name] else "off")


def test_settings_page_gives_the_init_defaults(monkeypatch):
    from ditron.runtime.config import Settings

    for var in ("DITRON_HEAP_SIZE", "DITRON_WAIT_TIMEOUT", "DITRON_LAUNCH_TIMEOUT",
                "DITRON_LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    cpu, cuda = Settings.from_env("cpu"), Settings.from_env("cuda")
    page = _settings_defaults()
    assert page["DITRON_HEAP_SIZE"] == (f"`{cpu.heap_size >> 30}G` (cpu), "
                                        f"`{cuda.heap_size >> 30}G` (cuda)")
    assert page["DITRON_WAIT_TIMEOUT"] == (f"`{cpu.wait_timeout:g}` (cpu), "
                                           f"`{cuda.wait_timeout:g}` = off (cuda)")
    assert page["DITRON_LAUNCH_TIMEOUT"] == f"`{cpu.launch_timeout:g}` = none"
    assert cpu.local_world_size is None  # "the node's processes"


def test_settings_page_gives_the_numeric_defaults(monkeypatch):
    """The module constants each variable overrides (read with the variable unset)."""
    from ditron.ops import chunked_exchanges, exchange, replays
    from ditron.tune import cache, tuner

    monkeypatch.delenv("DITRON_CACHE_DIR", raising=False)
    page = _settings_defaults()
    for var, value in [("DITRON_REPLAY_GRAPHS", replays.MAX_GRAPHS),
                       ("DITRON_GRAPH_HALVES", exchange.GRAPH_HALVES),
                       ("DITRON_PUSH_LANES", chunked_exchanges.PUSH_LANES)]:
        if not os.environ.get(var):
            assert page[var] == f"`{value}`", var
    assert page["DITRON_TUNE_MARGIN"] == f"`{tuner.MARGIN}`"
    assert page["DITRON_PULL_CHUNK_BYTES"] == f"{chunked_exchanges.PULL_CHUNK_BYTES >> 20} MiB"
    assert Path(cache.cache_dir()) == Path("~/.cache/ditron").expanduser()
    assert page["DITRON_CACHE_DIR"] == "`~/.cache/ditron`"


#: the modules whose public ops docs/collectives.md's table lists
COLLECTIVE_MODULES = ("ditron.ops.collectives", "ditron.ops.a2a_device", "ditron.ops.p2p")


def _documented_ops(page: str) -> dict[str, list[str]]:
    """``name(params)`` of every first cell of the page's tables, each parameter as given."""
    found = {}
    for cell in _first_column(page):
        for names, params in SIGNATURE.findall(cell):
            for name in names.split(" / "):
                found[name] = [p.strip() for p in params.split(",") if p.strip()]
    return found


def _parameters(fn) -> list[tuple[str, object]]:
    """``(name, default)`` of each parameter (``inspect.Parameter.empty`` for none), with
    ``("*", empty)`` where the keyword-only ones start."""
    found, star = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            found.append(("*", inspect.Parameter.empty))
            star = True
        found.append((p.name, p.default))
    return found


def test_collectives_table_names_every_collective():
    import ditron.ops

    ops = {name for name in ditron.ops.__all__
           if getattr(ditron.ops, name).__module__ in COLLECTIVE_MODULES}
    assert set(_documented_ops("docs/collectives.md")) == ops


@pytest.mark.parametrize("name", sorted(_documented_ops("docs/collectives.md")))
def test_collectives_table_signatures(name):
    """Every parameter of the op, in the code's order, keyword-only ones after ``*``, each
    with the code's default (a user copying a call from the table gets what it says)."""
    import ditron.ops

    page = []
    for text in _documented_ops("docs/collectives.md")[name]:
        pname, eq, default = text.partition("=")
        page.append((pname.strip(), ast.literal_eval(default.strip()) if eq
                     else inspect.Parameter.empty))
    assert page == _parameters(getattr(ditron.ops, name)), name


def test_readme_lists_every_command():
    """README's list of commands (``python -m ditron info | demo | bench collectives | ...``)
    names every subcommand and every benchmark the CLI has, and nothing else."""
    from ditron import cli

    listed = re.search(r"`python -m ditron ([^`]+)`", (ROOT / "README.md").read_text())
    commands = {" ".join(c.split()) for c in listed.group(1).split("|")}
    assert commands == {"info", "demo", "trace", *(f"bench {b}" for b in cli._benchmarks())}


def test_settings_page_names_the_forcing_switches():
    """The page's sentence on the variables that force a choice either way (read by
    ``env_switch``: ``0`` / ``1``, other values refused) names exactly those."""
    code = {name for path in (ROOT / "ditron").rglob("*.py")
            for name in re.findall(r"env_switch\(\"(DITRON_\w+)\"\)", path.read_text())}
    text = (ROOT / "docs/settings.md").read_text()
    sentence = re.search(r"[^.]*force a choice either way[^.]*\.", text).group(0)
    assert set(re.findall(r"DITRON_\w+", sentence)) == code


def test_developing_page_gives_the_layer_order():
    """docs/developing.md's "(language < runtime < ...)" is the order tests/test_layers.py
    holds every import to (the package's ``__init__`` and ``__main__`` left out)."""
    from tests.test_layers import LAYERS

    text = " ".join((ROOT / "docs/developing.md").read_text().split())
    order = re.search(r"\((language < [^)]*)\)", text).group(1)
    page = [{name.strip() for name in group.split(",")} for group in order.split("<")]
    code: dict[int, set[str]] = {}
    for unit, layer in LAYERS.items():
        if not unit.startswith("__"):
            code.setdefault(layer, set()).add(unit)
    assert page == [code[layer] for layer in sorted(code)]


def _command_parsers() -> dict[str, object]:
    """The ``argparse`` parser of every ``python -m ditron`` command, by its ``prog``
    (caught as ``--help`` prints it)."""
    import argparse
    import contextlib
    import io
    from unittest import mock

    from ditron import cli

    found = {}

    def caught(parser, file=None):
        found[parser.prog] = parser
        raise SystemExit(0)

    commands = [["info"], ["demo"], ["trace"], *(["bench", b] for b in cli._benchmarks())]
    with mock.patch.object(argparse.ArgumentParser, "print_help", caught):
        for command in commands:
            with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
                cli.main([*command, "--help"])
    assert len(found) == len(commands), sorted(found)
    return found


def test_help_gives_every_default():
    """Every option of a ``python -m ditron`` command that has a value when not given says
    in its ``--help`` what that value is (``--graph-calls`` took 50 calls per graph, its
    help said nothing)."""
    import argparse

    silent = [f"{prog} {action.option_strings[0]} (default {action.default!r})"
              for prog, parser in _command_parsers().items() for action in parser._actions
              if action.default not in (None, False, "", argparse.SUPPRESS)
              and "default" not in (action.help or "").lower()]
    assert not silent, silent


def _page_text(page: str) -> str:
    """The page with every run of white space as one space (sentences wrap anywhere)."""
    return " ".join((ROOT / page).read_text().split())


def test_collectives_page_gives_the_engine_thresholds():
    """The sizes at which ``"auto"`` changes engine or method, the fused launches' limits
    and the TMA engine's defaults are the code's (a moved threshold left the page saying
    the old one)."""
    from ditron.engines.tma import _BOX_BYTES, TmaEngine
    from ditron.ops import collectives as c
    from ditron.ops import fused_launch as f

    def mb(n: int) -> str:
        return f"{n >> 20} MB"

    tma = inspect.signature(TmaEngine.__init__).parameters
    text = _page_text("docs/collectives.md")
    missing = [p for p in (
        f"for all-gather below {mb(c.FUSED_AG_MAX_BYTES)} per peer and reduce-scatter below "
        f"{mb(c.FUSED_RS_MAX_BYTES)},",
        f"with even splits fused below {mb(c.FUSED_A2A_MAX_BYTES)} per peer",
        f"with uneven splits `sm` below {mb(c.SM_MAX_BYTES)} per peer",
        f"from {mb(c.FUSED_GRAPH_MAX_BYTES)} per peer (`FUSED_GRAPH_MAX_BYTES`)",
        f"below `REPLAY_FUSED_MAX_BYTES` per peer "
        f"({mb(c.REPLAY_FUSED_MAX_BYTES['all_gather'])} all-gather, "
        f"{mb(c.REPLAY_FUSED_MAX_BYTES['reduce_scatter'])} reduce-scatter)",
        f"the fused kernel below {mb(c.REPLAY_FUSED_MAX_BYTES['all_gather'])} per peer for "
        f"the all-gather and {mb(c.REPLAY_FUSED_MAX_BYTES['reduce_scatter'])} for the "
        f"reduce-scatter",
        f"`REPLAY_MIN_BYTES` ({mb(c.REPLAY_MIN_BYTES)})",
        f"one-shot up to {c.ONE_SHOT_MAX_BYTES >> 10} KB, two-shot above",
        f"picks push from {f.PUSH_MIN_BYTES >> 10} KB",
        f"at most {f.FUSED_MAX_ELEMENTS >> 20} Mi input elements",
        f"{f.FUSED_MAX_ELEMENTS >> 20}M input elements (all-gather, all-reduce, all-to-all) "
        f"or {f.FUSED_RS_MAX_ELEMENTS >> 20}M (reduce-scatter",
        f"`block_rows` (default {tma['block_rows'].default}) {_BOX_BYTES}-byte rows, "
        f"`stages` (default {tma['stages'].default})",
    ) if p not in text]
    assert not missing, missing


def test_pages_give_the_longest_cuda_wait():
    """A wait's poll budget is an int32: the longest timeout on CUDA the pages give."""
    from ditron.runtime.backends.cuda import CudaBackend
    from ditron.runtime.world import MAX_POLLS

    seconds = MAX_POLLS / CudaBackend.polls_per_second
    assert f"gives up after about {round(seconds)} s at most" in _page_text("docs/settings.md")
    assert f"on CUDA it is at most about {round(seconds, -1):.0f} s" in \
        _page_text("docs/language.md")


def test_megakernel_page_gives_the_defaults():
    """Programs per SM, slots per poll, tasks per chain and the default tile sizes by token
    count, as docs/megakernel.md gives them."""
    import torch

    from ditron.task import codegen, megakernel
    from ditron.task.tp_mlp import MlpBlocks, default_blocks

    text = _page_text("docs/megakernel.md")
    blocks = {t: default_blocks(t, torch.bfloat16).label() for t in (16, 32, 64, 128)}
    missing = [p for p in (
        f"the default is {megakernel.PROGRAMS_PER_SM} programs per SM",
        f"(`dl.wait_all`, {codegen.WAIT_BLOCK} slots per poll)",
        f"chains of up to {codegen.CHAIN} tasks",
        f"(`MlpBlocks()` = `{MlpBlocks().label()}` up to 16 tokens, `{blocks[32]}` up to 32, "
        f"`{blocks[64]}` up to 64, `{blocks[128]}` beyond;",
    ) if p not in text]
    assert not missing, missing
    assert blocks[16] == MlpBlocks().label()


def test_tp_gemm_page_gives_the_communication_sms():
    from ditron.ops import tp_gemm

    assert f"`COMM_SMS = {tp_gemm.COMM_SMS}`" in _page_text("docs/tp_gemm.md")
