"""Settings: ``docs/settings.md`` names exactly the ``DITRON_*`` variables the code reads,
and on/off variables read one way, whatever their default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"DITRON_[A-Z0-9_]*[A-Z0-9]")


def _names(paths) -> set[str]:
    return {n for p in paths for n in NAME.findall(p.read_text())}


def test_settings_page_names_every_variable_the_code_reads():
    code = _names([*(ROOT / "ditron").rglob("*.py"), *(ROOT / "tools").glob("*.py")])
    page = _names([ROOT / "docs" / "settings.md"])
    assert code - page == set(), f"read by the code, missing from docs/settings.md: {code - page}"
    # the page's per-op engine variables are spelled out from DITRON_<OP>_ENGINE
    per_op = {f"DITRON_{op.upper()}_ENGINE"
              for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")}
    assert page - code - per_op == set(), f"on the page, read by nothing: {page - code - per_op}"


@pytest.mark.parametrize("value, off_default, on_default",
                         [(None, False, True), ("", False, True), ("1", True, True),
                          ("yes", True, True), ("0", False, False), ("false", False, False),
                          (" OFF ", False, False), ("no", False, False)])
def test_env_flag_defaults(value, off_default, on_default, monkeypatch):
    from ditron.runtime.config import env_flag

    if value is None:
        monkeypatch.delenv("DITRON_SOME_FLAG", raising=False)
    else:
        monkeypatch.setenv("DITRON_SOME_FLAG", value)
    assert env_flag("DITRON_SOME_FLAG") is off_default
    assert env_flag("DITRON_SOME_FLAG", True) is on_default


def test_default_on_switches_turn_off_one_way(monkeypatch):
    # the experiment switches that default to on: "false" turns them off as "0" does
    from ditron.runtime import triton_launch

    monkeypatch.setenv("DITRON_FAST_LAUNCH", "false")
    kernel = triton_launch.FastKernel.__new__(triton_launch.FastKernel)
    kernel._params = [object()]
    assert kernel._enabled() is False
