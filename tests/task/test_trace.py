"""Traced megakernels: every item recorded once per call, in an order the dependencies allow,
as events of ``ditron.trace`` (one thread per program) and trace files."""

from __future__ import annotations

import json
import os

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl
from ditron import task as dt
from ditron import trace

from .test_megakernel import _double_tile


@triton.jit
def _push_next_tile(tile, src, box, n, ctx, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    peer = (ctx.rank + 1) % ctx.world_size
    dl.store(box + offs, tl.load(src + offs, mask=offs < n), peer, ctx, mask=offs < n)


def _check_rows(mk) -> int:
    """Each item once; a row's stamps in order; an item's waits end after the local items
    it waits for have ended (their notifies come last). Returns the items checked."""
    s = mk.schedule
    rows = mk.last_trace
    assert sorted(r[0] for r in rows) == list(range(s.n_items))
    by_item = {r[0]: r for r in rows}
    for item, program, start, ready, tile_done, end in rows:
        assert 0 <= program < mk.programs
        assert start <= ready <= tile_done <= end, (item, start, ready, tile_done, end)
        for slot in s.dep_slot[s.dep_ptr[item]:s.dep_ptr[item + 1]]:
            producer_rank, producer = divmod(slot, s.n_items)
            if producer_rank == s.rank and producer < s.n_items:
                assert by_item[producer][5] <= ready, (item, producer)
    return len(rows)


def _traced_case(out_dir: str) -> int:
    """Each rank pushes its ``src`` into the next rank's ``box``, which two tasks double."""
    w = ditron.world()
    n = 40
    src = torch.empty(n, device=w.device)
    box = ditron.empty(n, torch.float32)
    out = torch.empty(n, device=w.device)
    y = torch.empty(n, device=w.device)
    g = dt.TaskGraph("traced")
    g.add("push", _push_next_tile, src, box, n, dt.CTX, 64, tiles=1,
          reads=lambda t, r: [dt.region(src)],
          writes=lambda t, r: [dt.region(box, rank=(r + 1) % w.world_size)])
    g.add("double", _double_tile, box, out, n, 64, tiles=1,
          reads=lambda t, r: [dt.region(box)], writes=lambda t, r: [dt.region(out)])
    g.add("again", _double_tile, out, y, n, 64, tiles=1,
          reads=lambda t, r: [dt.region(out)], writes=lambda t, r: [dt.region(y)])
    trace.clear()
    mk = g.compile(trace=True)
    assert mk.traced
    checked = 0
    sender = (w.rank - 1) % w.world_size
    for call in range(2):
        src.copy_(torch.arange(n) + 100.0 * w.rank + call)
        y.fill_(float("nan"))
        mk()
        assert torch.equal(y.cpu(), 4 * (torch.arange(n) + 100.0 * sender + call))
        checked += _check_rows(mk)
    calls = [e for e in trace.events() if e["name"] == "megakernel traced call"]
    assert [e["args"]["call"] for e in calls] == [0, 1]
    assert {name: t["tiles"] for name, t in calls[-1]["args"]["tasks"].items()} == {
        "push": 1, "double": 1, "again": 1}
    tiles = [e for e in trace.events() if e["ph"] == "X" and e["tid"] >= trace.PROGRAM_TID]
    assert sorted(e["name"] for e in tiles if e["name"] != "wait") == sorted(
        ["push 0", "double 0", "again 0"] * 2)
    paths = trace.write(trace.events(), os.path.join(out_dir, f"rank{w.rank}"))
    with open(paths[0]) as f:
        names = {e["args"]["name"] for e in json.load(f)["traceEvents"] if e["ph"] == "M"}
    assert f"program {tiles[0]['tid'] - trace.PROGRAM_TID}" in names
    return checked


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_traced_megakernel(world_size, backend, tmp_path):
    res = ditron.launch(_traced_case, world_size, str(tmp_path), backend=backend)
    assert res == [6] * world_size


def _untraced_case() -> int:
    x = torch.zeros(8, device=ditron.world().device)
    g = dt.TaskGraph("plain")
    g.add("double", _double_tile, x, x, 8, 64, tiles=1,
          reads=lambda t, r: [dt.region(x)], writes=lambda t, r: [dt.region(x)])
    trace.clear()
    mk = g.compile()
    mk()
    return len(trace.events()) + len(mk.last_trace) + int(mk.traced)


def test_untraced_by_default(backend):
    assert ditron.launch(_untraced_case, 1, backend=backend) == [0]


def _item(task: str, program: int, start: float, dur: float, rank: int = 0) -> dict:
    name = "wait" if task == "wait" else f"{task} 0"
    return {"name": name, "ph": "X", "pid": rank, "tid": trace.PROGRAM_TID + program,
            "ts": start, "dur": dur, "args": {"task": task, "tile": 0}}


def test_program_occupancy_counts_programs_per_task_over_time():
    # program 0: layer0.up 0-4, waits 4-6, layer1.up 6-8; program 1: layer0.down 2-6;
    # rank 1's and the op's own events are not rank 0's programs
    events = [_item("layer0.up", 0, 0, 4), _item("wait", 0, 4, 2), _item("layer1.up", 0, 6, 2),
              _item("layer0.down", 1, 2, 4), _item("layer0.up", 0, 0, 9, rank=1),
              {"name": "megakernel g call", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 9}]
    times, counts = trace.program_occupancy(events, 0)
    assert times == [0, 2, 4, 6, 8]
    assert list(counts) == ["up", "down", "wait"]  # tasks in the order they ran, waits last
    assert counts == {"up": [1, 1, 0, 1, 0], "down": [0, 1, 1, 0, 0], "wait": [0, 0, 1, 0, 0]}
    assert trace.program_occupancy(events, 1)[1] == {"up": [1, 0]}
    assert trace.program_occupancy(events, 2) == ([], {})


def test_trace_png_draws_op_tiles_and_programs(tmp_path):
    # matplotlib comes with the test extra; without it write() gives the JSON only
    op = [{"name": "tile 0", "ph": "X", "pid": 0, "tid": 2, "ts": 0.0, "dur": 3.0},
          {"name": "wait", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 1.0}]
    paths = trace.write(op + [_item("mlp.up", 0, 1, 2), _item("wait", 1, 1, 1)],
                        str(tmp_path / "both"))
    assert paths[1].endswith(".png") and os.path.getsize(paths[1]) > 0
    with open(paths[0]) as f:
        assert len([e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]) == 4


def test_trace_with_no_spans_writes_the_json_only(tmp_path):
    """No tile or task span (a call that did not overlap): the JSON, and no PNG (drawing
    zero panels once raised matplotlib's "Number of rows must be a positive integer")."""
    call = {"name": "ag_gemm call", "ph": "i", "pid": 0, "tid": 0, "ts": 0.0, "args": {}}
    for events in ([], [call]):
        paths = trace.write(events, str(tmp_path / "none"))
        assert paths == [str(tmp_path / "none") + ".json"]
        with open(paths[0]) as f:
            assert len(json.load(f)["traceEvents"]) >= len(events)
