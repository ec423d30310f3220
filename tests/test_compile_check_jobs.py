"""``tools/cuda_compile_check.py``'s process count from ``DITRON_COMPILE_JOBS``. The tool
sets ``DITRON_BACKEND=cuda`` and drops ``TRITON_INTERPRET`` when imported, so it is
imported in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(__file__), os.pardir, "tools", "cuda_compile_check.py")

_PROBE = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("cuda_compile_check", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tool  # its dataclasses look their module up there
spec.loader.exec_module(tool)
seen = {}
for value in json.loads(sys.argv[2]):
    os.environ["DITRON_COMPILE_JOBS"] = value
    try:
        seen[value] = tool.default_jobs()
    except SystemExit as exc:
        seen[value] = str(exc)
print(json.dumps(seen))
"""


def test_job_counts_taken_or_refused_naming_the_variable():
    # before: "abc" and "1.5" raised int()'s bare ValueError, "0" and "-2" ran one process
    # silently, "" raised ValueError instead of taking one per CPU
    values = ["abc", "0", "-2", "1.5", " 3 ", ""]
    run = subprocess.run([sys.executable, "-c", _PROBE, TOOL, json.dumps(values)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    for bad in ("abc", "0", "-2", "1.5"):
        assert seen[bad] == (f"cuda_compile_check: DITRON_COMPILE_JOBS must be an integer "
                             f">= 1, got '{bad}'")
    assert seen[" 3 "] == 3 and seen[""] == max(1, os.cpu_count() or 1)
