"""The generated megakernel source: unusual but valid graphs, names that could clash in it,
many tasks, and the cache of generated modules (which graphs share one, which must not)."""

from __future__ import annotations

import ast
import importlib
import sys

import pytest
import torch
import triton
import triton.language as tl

import ditron
from ditron import task as dt
from ditron.task import codegen


@triton.jit
def _scale_tile(tile, x, y, n, factor, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs, mask=offs < n) * factor, mask=offs < n)


@triton.jit
def _index_only_tile(tile):
    pass


@triton.jit
def _add_named_like_callee_tile(tile, x, task_0, BLOCK: tl.constexpr):
    """A parameter named like the generated alias of the first task's tile function."""
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + task_0)


@triton.jit
def _index_named_like_callee_tile(task_0, x, BLOCK: tl.constexpr):
    """A tile index named like the generated alias of the first task's tile function."""
    offs = task_0 * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + 1 + task_0)


@triton.jit
def _mark_tile(tile, x, k):
    tl.store(x + k, k + 1.0)


def _if_depth(text: str) -> int:
    """The deepest nesting of ``if`` statements in ``text`` (an ``elif`` nests one more)."""
    def depth(node: ast.AST) -> int:
        inner = max((depth(c) for c in ast.iter_child_nodes(node)), default=0)
        return inner + isinstance(node, ast.If)

    return depth(ast.parse(text))


def _clashing_names_case() -> list[float]:
    x = torch.zeros(32, device=ditron.world().device)
    got = []
    for outline in (True, False):
        for fn, args in ((_add_named_like_callee_tile, (x, 1.0, 16)),
                         (_index_named_like_callee_tile, (x, 16))):
            x.zero_()
            g = dt.TaskGraph("clash")
            g.add("a", fn, *args, tiles=2,
                  writes=lambda t, r: dt.region(x, (16 * t, 16 * t + 16)))
            g.compile(outline=outline)()
            got += [x[0].item(), x[16].item()]
    return got


def test_parameters_named_like_the_callee(backend):
    # the out-of-line caller took the tile function's own parameter names, so one named
    # "task_0" hid the callee: "'float' object is not callable"
    got = ditron.launch(_clashing_names_case, 1, backend=backend)
    assert got == [[1.0, 1.0, 1.0, 2.0] * 2]


def test_many_tasks_dispatch_in_a_shallow_tree():
    """One ``elif`` per task nested 300 deep: Triton's CUDA front end exceeded Python's
    recursion limit at 200 tasks (``RecursionError``, found with
    ``tools/cuda_compile_check.py``); the dispatch is now chains of at most ``CHAIN`` tasks
    under a binary tree of task-id tests, and a graph of a few tasks keeps its flat chain."""
    x = torch.zeros(300)
    for count, deepest in ((3, 3), (codegen.CHAIN, codegen.CHAIN), (300, 30)):
        g = dt.TaskGraph("many")
        for k in range(count):
            g.add(f"t{k}", _mark_tile, x, k, tiles=0)
        for outline in (True, False):
            text, _ = codegen.source(g.tasks, outline)
            dispatch = [line.strip() for line in text.splitlines()
                        if line.strip().startswith(("if task", "elif task", "else:"))]
            assert sum(line.startswith(("if task ==", "elif task ==")) for line in dispatch) \
                == count
            assert any("task <" in line for line in dispatch) == (count > codegen.CHAIN)
            # the item loop's own ifs nest 3 deep around the dispatch
            assert _if_depth(text) <= 3 + deepest, (count, outline)


def _many_tasks_case(count: int) -> list[float]:
    x = torch.zeros(count, device=ditron.world().device)
    g = dt.TaskGraph("many")
    for k in range(count):
        g.add(f"t{k}", _mark_tile, x, k, tiles=1, writes=lambda t, r, k=k: dt.region(x, k))
    g.compile()()
    return x.tolist()


def test_many_tasks_each_run_their_own_branch(backend):
    count = 2 * codegen.CHAIN + 7  # two levels of the tree, chains of unequal lengths
    got = ditron.launch(_many_tasks_case, 1, count, backend=backend)
    assert got == [[k + 1.0 for k in range(count)]]


def _odd_graphs_case() -> list:
    """An empty graph, tasks of no tiles around one of one tile, a tile function taking the
    tile index alone; each called twice (traced: rows for the items there are)."""
    w = ditron.world()
    x = torch.ones(16, device=w.device)
    got = []
    for kind in ("empty", "zero tiles", "index only"):
        g = dt.TaskGraph(kind)
        if kind == "zero tiles":
            for name, tiles in (("a", 0), ("b", 1), ("c", 0)):
                g.add(name, _scale_tile, x, x, 16, 3.0, 16, tiles=tiles,
                      writes=lambda t, r: dt.region(x))
        elif kind == "index only":
            g.add("a", _index_only_tile, tiles=2)
        mk = g.compile(trace=True)
        mk()
        mk()
        got.append((kind, mk.schedule.n_items, len(mk.last_trace), x[0].item()))
    return got


def test_empty_graphs_and_tasks_of_no_tiles(backend):
    expected = [("empty", 0, 0, 1.0), ("zero tiles", 1, 1, 9.0), ("index only", 2, 2, 9.0)]
    assert ditron.launch(_odd_graphs_case, 2, backend=backend) == [expected] * 2


def _constants_case() -> list:
    """Graphs of one tile function that differ only in a runtime constant, a constexpr or
    a dtype share one generated module, and each megakernel keeps its own values: calls
    alternate between them."""
    dev = ditron.world().device
    runs = []
    for dtype, factor, block in ((torch.float32, 2.0, 16), (torch.float32, 3.0, 16),
                                 (torch.float32, 2.0, 8), (torch.float16, 3.0, 16),
                                 (torch.int32, 2, 4)):
        x = torch.ones(40, dtype=dtype, device=dev)
        g = dt.TaskGraph("constants")
        g.add("s", _scale_tile, x, x, 40, factor, block, tiles=-(-40 // block),
              writes=lambda t, r, x=x, b=block: dt.region(x, (t * b, t * b + b)))
        runs.append((g.compile(), x, factor, codegen.load(g.tasks)))
    assert all(module is runs[0][3] for *_, module in runs)
    for _ in range(2):
        for mk, *_ in runs:
            mk()
    return [(x.unique().tolist(), factor * factor) for _, x, factor, _ in runs]


def test_graphs_differing_in_a_constant_share_the_module(backend):
    got = ditron.launch(_constants_case, 1, backend=backend)[0]
    assert all(values == [expected] for values, expected in got), got


def _redefined_case() -> list[float]:
    x = torch.zeros(16, device=ditron.world().device)
    got = []
    for inc in (1.0, 2.0):
        @triton.jit
        def bump(tile, x, inc, BLOCK: tl.constexpr):  # a new function object each time
            offs = tl.arange(0, BLOCK)
            tl.store(x + offs, tl.load(x + offs) + inc)

        g = dt.TaskGraph("redefined")
        g.add("a", bump, x, inc, 16, tiles=1, writes=lambda t, r: dt.region(x))
        g.compile()()
        got.append(x[0].item())
    return got


_RELOADED = '''
import triton
import triton.language as tl


@triton.jit
def bump(tile, x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + {inc})
'''


def _reloaded_case(folder: str) -> list[float]:
    sys.path.insert(0, folder)
    x = torch.zeros(16, device=ditron.world().device)
    got = []
    for inc in (1, 100):  # different file sizes: the reload does not take a stale .pyc
        with open(f"{folder}/ditron_reloaded_tiles.py", "w") as f:
            f.write(_RELOADED.format(inc=inc))
        importlib.invalidate_caches()
        module = sys.modules.get("ditron_reloaded_tiles")
        module = (importlib.reload(module) if module
                  else importlib.import_module("ditron_reloaded_tiles"))
        g = dt.TaskGraph("reloaded")
        g.add("a", module.bump, x, 16, tiles=1, writes=lambda t, r: dt.region(x))
        x.zero_()
        g.compile()()  # run before the next rewrite: the interpreter reads the source then
        got.append(x[0].item())
    return got


def test_a_redefined_or_reloaded_tile_function_runs_itself(backend, tmp_path):
    # a tile function made anew inside the function building the graph (or a notebook
    # cell run again) raised "two different tile functions named ... in one process";
    # one of a reloaded module ran its old code silently (the module cached by source)
    assert ditron.launch(_redefined_case, 1, backend=backend) == [[1.0, 3.0]]
    got = ditron.launch(_reloaded_case, 1, str(tmp_path), backend=backend)
    assert got == [[1.0, 100.0]]


def _launch_options_case() -> list[str]:
    x = torch.ones(16, device=ditron.world().device)
    g = dt.TaskGraph("options")
    g.add("s", _scale_tile, x, x, 16, 2.0, 16, tiles=1, writes=lambda t, r: dt.region(x))
    refused = []
    for bad in ({"num_stage": 3}, {"TRACE": True}, {"t0_BLOCK": 8}):
        with pytest.raises(ValueError, match="is not a Triton launch option") as info:
            g.compile(**bad)
        refused.append(str(info.value).split(" is ")[0])
    g.compile(num_stages=2)()  # a real one
    assert x[0].item() == 2.0
    return refused


def test_unknown_launch_options_are_refused(backend):
    # compile(num_stage=3), a typo, was ignored on the CPU backend and raised KeyError at
    # the first call on a GPU; TRACE=True made an untraced kernel write its trace rows
    # past a one-word buffer
    got = ditron.launch(_launch_options_case, 1, backend=backend)
    assert got == [["compile: 'num_stage'", "compile: 'TRACE'", "compile: 't0_BLOCK'"]]


def test_module_names_that_cannot_be_imported_are_injected(tmp_path):
    """A tile function of a module loaded from a file under a name that is no Python
    identifier (``my-tiles``) was imported by that name: ``SyntaxError`` in the generated
    module."""
    path = tmp_path / "tiles.py"
    path.write_text("import triton\n\n\n@triton.jit\ndef t(tile, x):\n    pass\n")
    spec = importlib.util.spec_from_file_location("my-tiles", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["my-tiles"] = module
    try:
        spec.loader.exec_module(module)
        g = dt.TaskGraph()
        g.add("a", module.t, torch.empty(4), tiles=1)
        text, inject = codegen.source(g.tasks)
        assert "import t as" not in text and inject == {"task_0": module.t}
        ast.parse(text)
    finally:
        del sys.modules["my-tiles"]


def _unwritable_cache_case(folder: str) -> str:
    import os

    me = ditron.world().rank
    bad = os.path.join(folder, "a-file")
    open(bad, "w").close()
    # rank 1 cannot write its generated module: its cache folder is a file
    os.environ["DITRON_CACHE_DIR"] = bad if me == 1 else os.path.join(folder, f"r{me}")
    x = torch.ones(16, device=ditron.world().device)
    g = dt.TaskGraph("unwritable")
    g.add("s", _scale_tile, x, x, 16, 3.0, 16, tiles=1, writes=lambda t, r: dt.region(x))
    try:
        g.compile()
    except Exception as e:  # noqa: BLE001 - what each rank raises is the result
        return f"{type(e).__name__}: {e}"
    return "compiled"


def test_a_rank_that_cannot_write_its_module_is_named_on_every_rank(backend, tmp_path):
    """A rank that could not write the generated module raised alone after the agreement;
    its peers went on to the barrier and raised naming only ``ditron.shutdown``. The
    module is written with the schedule now, and every rank names the failing one."""
    got = ditron.launch(_unwritable_cache_case, 2, str(tmp_path), backend=backend)
    assert got[1].startswith("NotADirectoryError"), got
    assert "rank 1" in got[0] and "NotADirectoryError" in got[0], got


def _pruned_case(folder: str) -> tuple[list[str], float, list[float]]:
    """Old generated modules are removed when a new one is written; a load renews the time
    of the file it loads."""
    import os
    import time

    files = os.path.join(folder, "megakernels")
    os.makedirs(files)
    month = time.time() - 31 * 24 * 3600
    for name, when in (("ditron_megakernel_old.py", month), ("notes.py", month),
                       ("ditron_megakernel_recent.py", time.time() - 24 * 3600)):
        with open(os.path.join(files, name), "w") as f:
            f.write("# not a megakernel\n")
        os.utime(os.path.join(files, name), (when, when))
    x = torch.ones(40, device=ditron.world().device)
    g = dt.TaskGraph("pruned")
    g.add("s", _scale_tile, x, x, 40, 2.0, 16, tiles=3,
          writes=lambda t, r: dt.region(x, (t * 16, t * 16 + 16)))
    mk = g.compile()  # writes its module: the old one goes
    mk()
    left = sorted(os.listdir(files))
    path = os.path.join(files, next(n for n in left if n not in
                                    ("notes.py", "ditron_megakernel_recent.py")))
    os.utime(path, (month, month))
    mk.free()
    del mk
    mk = g.compile()  # loads the module again: its file is in use
    mk()
    mk.free()
    return left, os.stat(path).st_mtime - month, x.unique().tolist()


def test_unused_module_files_are_pruned(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    left, renewed, values = ditron.launch(_pruned_case, 1, str(tmp_path), backend=backend)[0]
    assert values == [4.0]
    assert len(left) == 3 and "ditron_megakernel_old.py" not in left, left
    assert {"notes.py", "ditron_megakernel_recent.py"} <= set(left), left
    assert renewed > 30 * 24 * 3600 - 60, renewed
