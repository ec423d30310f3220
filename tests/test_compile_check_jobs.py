"""``tools/cuda_compile_check.py``'s process count from ``DITRON_COMPILE_JOBS``."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

TOOL = os.path.join(os.path.dirname(__file__), os.pardir, "tools", "cuda_compile_check.py")


def _tool():
    spec = importlib.util.spec_from_file_location("cuda_compile_check_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_a_bad_job_count_names_the_variable(monkeypatch, value):
    # before: "abc" raised int()'s bare ValueError, "0" and "-2" ran one process silently
    monkeypatch.setenv("DITRON_COMPILE_JOBS", value)
    with pytest.raises(SystemExit, match=f"DITRON_COMPILE_JOBS must be an integer >= 1, got "
                                         f"'{value}'"):
        _tool().default_jobs()


def test_job_count_taken_or_one_per_cpu(monkeypatch):
    monkeypatch.setenv("DITRON_COMPILE_JOBS", " 3 ")
    assert _tool().default_jobs() == 3
    monkeypatch.setenv("DITRON_COMPILE_JOBS", "")
    assert _tool().default_jobs() == max(1, os.cpu_count() or 1)
