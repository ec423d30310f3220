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
