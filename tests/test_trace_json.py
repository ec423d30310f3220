"""``ditron trace``'s Chrome / Perfetto JSON: every event has the fields its phase needs,
each rank is a process, and each thread's events are in time order with spans that nest
or follow each other (viewers take a thread's spans as a stack)."""

from __future__ import annotations

import json
import types
from collections import defaultdict

import pytest
import torch

from ditron import trace

#: fields each event phase needs (complete span, instant, metadata)
REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"},
            "i": {"name", "ph", "ts", "pid", "tid", "s"},
            "M": {"name", "ph", "pid", "args"}}


def check_trace(path: str) -> dict[tuple[int, int], list[dict]]:
    """Validate a written trace; return its timed events by ``(pid, tid)`` track."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    named = set()
    for e in events:
        assert REQUIRED[e["ph"]] <= set(e), e
        if e["ph"] == "M":
            if e["name"] != "process_name":
                named.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["ts"], float | int) and e["ts"] == e["ts"], e
        assert e["ph"] != "X" or e["dur"] >= 0, e
        tracks[(e["pid"], e["tid"])].append(e)
    for track, evs in tracks.items():
        assert track in named, f"track {track} has no thread_name"
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), f"track {track}: timestamps out of order"
        open_ends: list[float] = []  # the spans that contain the current one
        for e in (e for e in evs if e["ph"] == "X"):
            while open_ends and open_ends[-1] <= e["ts"] + 1e-4:
                open_ends.pop()
            assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + 1e-4, (
                f"track {track}: {e['name']} at {e['ts']} overlaps a span without nesting")
            open_ends.append(e["ts"] + e["dur"])
    return tracks


def test_concurrent_gpu_tiles_go_to_lanes(tmp_path, monkeypatch):
    """On a GPU the persistent GEMM's programs run tiles at once; ``record`` put all of
    them on the tiles' thread, where their spans overlap without nesting (Perfetto drops
    such slices, chrome://tracing misdraws them). ``write`` now spreads them over lanes."""
    import ditron.runtime.world as world
    from ditron.kernels.gemm import TRACE_FIELDS

    gpu = types.SimpleNamespace(rank=1, device=torch.device("cuda", 0))
    monkeypatch.setattr(world, "current", lambda: types.SimpleNamespace(world=gpu))
    trace.clear()
    # (tile, start, chunks ready, main loop done, end), ns of the device clock: program 0
    # runs tiles 0 and 2, program 1 tiles 1 and 3, at the same time
    rows = [(0, 1000, 1000, 5000, 6000), (1, 1100, 2000, 5500, 6500),
            (2, 6000, 6000, 9000, 9500), (3, 6500, 7000, 9800, 10400)]
    assert TRACE_FIELDS == len(rows[0])
    buf = torch.tensor([len(rows) * TRACE_FIELDS] + [v for r in rows for v in r])
    trace.record("ag_gemm", buf, 2, 10**9, 10**9 + 20000)
    recorded = trace.events()
    trace.clear()
    paths = trace.write(recorded, str(tmp_path / "gpu"))
    tracks = check_trace(paths[0])
    assert {pid for pid, _ in tracks} == {1}
    tiles = [e for evs in tracks.values() for e in evs if e["name"].startswith("tile ")]
    assert len(tiles) == 4 and len({e["tid"] for e in tiles}) == 2
    with open(paths[0]) as f:
        names = {e["args"]["name"] for e in json.load(f)["traceEvents"]
                 if e["name"] == "thread_name"}
    assert {"tiles (main loop)", "tiles (main loop) (2)"} <= names
    # the recorded events keep their threads
    assert {e["tid"] for e in recorded if e["name"].startswith("tile ")} == {2}


@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs"])
def test_trace_command_writes_a_valid_trace_per_rank(op, tmp_path, capsys):
    """``ditron trace`` on the CPU backend, 2 ranks, a shape that does not divide into
    tiles: a process per rank, every traced call and tile on it, the JSON valid."""
    out = str(tmp_path / op)
    assert trace.main(["--op", op, "--world-size", "2", "--m", "40", "--n", "40", "--k", "16",
                       "--calls", "2", "--dtype", "fp32", "--backend", "cpu",
                       "--out", out]) == 0
    tracks = check_trace(out + ".json")
    assert {pid for pid, _ in tracks} == {0, 1}
    for rank in (0, 1):
        calls = [e for e in tracks[(rank, 0)] if e["name"] == f"{op} call"]
        assert [e["args"]["call"] for e in calls] == [0, 1]
        tiles = [e for (pid, _), evs in tracks.items() if pid == rank for e in evs
                 if e["name"].startswith("tile ")]
        assert len(tiles) == 2 * calls[0]["args"]["tiles"] > 0
    assert f"rank 0 {op} call: call 0" in capsys.readouterr().out


def test_trace_of_an_untiled_engine_is_an_error(tmp_path, monkeypatch, capsys):
    """GEMM-RS on the copy engine computes with torch.matmul per chunk: no tile to trace.
    ``ditron trace`` wrote an empty trace (no PNG) and exited 0; now it says why, exit 1."""
    monkeypatch.setenv("DITRON_RS_ENGINE", "copy_engine")
    out = str(tmp_path / "rs")
    assert trace.main(["--op", "gemm_rs", "--world-size", "2", "--m", "16", "--n", "8",
                       "--k", "8", "--calls", "1", "--dtype", "fp32", "--backend", "cpu",
                       "--out", out]) == 1
    err = capsys.readouterr().err
    assert "no tile was recorded: gemm_rs ran no tiled GEMM kernel" in err, err
    assert "DITRON_RS_ENGINE=colocated" in err
    assert not list(tmp_path.iterdir())


class _Unscannable(list):
    """An event list that refuses to be scanned (appending and clearing still work)."""

    def __iter__(self):
        raise AssertionError("the recorded events were scanned")


def test_call_index_is_counted_not_scanned(monkeypatch):
    """Each traced call numbered itself by counting the earlier call events of all recorded
    ones: 2000 calls of 256 tiles took 177 s of host time (88 ms a call at the end), which
    also showed in the trace between the calls. The index is now a counter, reset by
    ``clear``."""
    import ditron.runtime.world as world
    from ditron.kernels.gemm import TRACE_FIELDS

    cpu = types.SimpleNamespace(rank=0, device=torch.device("cpu"))
    monkeypatch.setattr(world, "current", lambda: types.SimpleNamespace(world=cpu))
    monkeypatch.setattr(trace, "_EVENTS", _Unscannable())
    trace.clear()
    buf = torch.tensor([4 * 1] + [0, 0, 1, 2, 3])  # one tile, 4 logical stamps
    assert TRACE_FIELDS == 5
    for _ in range(3):
        trace.record("ag_gemm", buf, 1, 0, 1000)
    trace.record("gemm_rs", buf, 1, 0, 1000)
    trace.record_items("megakernel g", [[0, 0, 0, 1, 2, 3]], [("t", 0)], 4, 0, 1000)
    calls = [e for e in list.__iter__(trace._EVENTS) if e["name"].endswith(" call")]
    assert [(e["name"], e["args"]["call"]) for e in calls] == [
        ("ag_gemm call", 0), ("ag_gemm call", 1), ("ag_gemm call", 2), ("gemm_rs call", 0),
        ("megakernel g call", 0)]
    trace.clear()
    trace.record("ag_gemm", buf, 1, 0, 1000)
    assert trace._EVENTS[0]["args"]["call"] == 0


@pytest.mark.parametrize("out, words", [
    ("{tmp}/x", "'{tmp}/x.json' is a folder"),  # was IsADirectoryError after the whole run
    ("{tmp}/y", "'{tmp}/y.png' is a folder"),  # the same, from matplotlib
    ("", "'' names no file"),  # wrote '.json' and '.png.png', and said '.png'
    ("{tmp}/sub/", "'{tmp}/sub/' names no file"),  # FileNotFoundError after the run
])
def test_trace_out_that_cannot_be_written_is_a_usage_error(out, words, tmp_path, capsys,
                                                          monkeypatch):
    """``--out`` is refused before any rank starts where the JSON or the PNG it names
    would be a folder, or where it names no file."""
    monkeypatch.chdir(tmp_path)  # where '' wrote
    (tmp_path / "x.json").mkdir()
    (tmp_path / "y.png").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        trace.main(["--backend", "cpu", "--out", out.format(tmp=tmp_path)])
    assert exit_info.value.code == 2
    assert f"argument --out: {words.format(tmp=tmp_path)}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.png"]


def test_trace_out_with_a_suffix_writes_the_two_files(tmp_path, capsys):
    """``--out t.json`` (or ``t.png``) wrote ``t.json.json`` and ``t.json.png``; the suffix
    given is dropped, the two files are ``t.json`` and ``t.png``."""
    assert trace.output_prefix(str(tmp_path / "a" / "t.png")) == str(tmp_path / "a" / "t")
    assert trace.output_prefix("x.json.png") == "x.json"
    assert trace.main(["--world-size", "2", "--m", "2", "--n", "1", "--k", "1", "--calls",
                       "1", "--dtype", "fp32", "--backend", "cpu",
                       "--out", str(tmp_path / "t.json")]) == 0
    check_trace(str(tmp_path / "t.json"))
    written = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert written == ["t.json", "t.png"], written
    assert f"wrote {tmp_path / 't.json'}, {tmp_path / 't.png'}" in capsys.readouterr().err
