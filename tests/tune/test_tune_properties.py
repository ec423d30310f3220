"""Property tests of the tuner's cache, decisions and cost model (seeded random): a cache
file in any state of damage reads as empty and is replaced by the next write, readers
beside concurrent writers only ever see whole tables that grow, keys that differ only by
device, world size or dtype keep their entries apart, an unwritable or missing cache
folder behaves as documented; decisions survive the trip through JSON; the cost model never
predicts more bytes or more FLOPs to be faster, zero sizes included."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random

import pytest

from ditron.tune import cache, cost_model
from ditron.tune.decisions import Decision


def _table(rng: random.Random, n: int) -> dict:
    return {cache.make_key(rng.choice(["ag_gemm", "gemm_rs"]), (rng.randint(1, 9999),),
                           "bfloat16", rng.randint(1, 8), "cpu"): {"method": "fallback",
                                                                   "i": i}
            for i in range(n)}


def test_a_damaged_file_reads_as_empty_and_the_next_write_replaces_it(tmp_path, monkeypatch):
    """Empty, binary, not a table, or any truncation of a valid file: ``load`` returns the
    whole table or nothing, never raises; ``put`` then writes a readable file."""
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    path = tmp_path / cache.FILE
    rng = random.Random(0)
    table = _table(rng, 5)
    text = json.dumps(table, indent=1).encode()
    damaged = [b"", b"\x00" * 8, b"\xff\xfe", b"null", b"[]", b"3", b'"tune"', b"{",
               b"[" * 100_000,  # nested past Python's recursion limit: RecursionError
               *(text[:rng.randint(0, len(text) - 1)] for _ in range(40))]
    for content in damaged:
        path.write_bytes(content)
        assert cache.load() == {} and cache.get(next(iter(table))) is None, content
    path.write_bytes(text)
    assert cache.load() == table
    path.write_bytes(text[:len(text) // 2])
    cache.put("new", {"method": "overlap"})
    assert json.loads(path.read_text()) == {"new": {"method": "overlap"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.FILE, cache.FILE + ".lock"]


def _writer(directory: str, writer: int, puts: int) -> None:
    os.environ["DITRON_CACHE_DIR"] = directory
    for i in range(puts):
        cache.put(f"op|{writer}x{i}|bf16|w2|cpu", {"writer": writer, "i": i})


def _reader(directory: str, rounds: int, out) -> None:
    """Load over and over while the writers write: every table whole, each a superset of
    the one before (writers only add)."""
    os.environ["DITRON_CACHE_DIR"] = directory
    seen: dict = {}
    for _ in range(rounds):
        now = cache.load()
        for key, value in now.items():
            w, i = key.split("|")[1].split("x")
            assert value == {"writer": int(w), "i": int(i)}, (key, value)
        assert seen.items() <= now.items(), "an entry went missing"
        seen = now
    out.put(len(seen))


def test_readers_beside_concurrent_writers_see_whole_growing_tables(tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 15)) for w in range(3)]
    procs.append(ctx.Process(target=_reader, args=(str(tmp_path), 150, out)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert 0 <= out.get(timeout=5) <= 45
    assert len(json.loads((tmp_path / cache.FILE).read_text())) == 45


def test_keys_apart_by_device_world_size_and_dtype(tmp_path, monkeypatch):
    """Keys that differ in one part only (device, world size, dtype, shape, op) are
    distinct, so are their entries, and ``lookup`` reads the one of its own device."""
    import torch

    from ditron.tune import decisions

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    parts = {"op": ["ag_gemm", "gemm_rs", "gemm_ar"], "shape": [(8, 16, 32), (816, 32),
                                                                  (8, 1632)],
             "dtype": ["bfloat16", "float16", "float32"], "world_size": [1, 2, 12],
             "device_name": ["cpu", "NVIDIA H200", "NVIDIA H200, nodes of 2"]}
    keys = {cache.make_key(op, s, d, w, dev) for op in parts["op"] for s in parts["shape"]
            for d in parts["dtype"] for w in parts["world_size"] for dev in parts["device_name"]}
    assert len(keys) == 3 ** 5
    entry = {"config": dataclasses.asdict(decisions.GemmConfig()), "engine": "colocated",
             "chunk_rows": None, "early_rows": 0, "graph": None}
    for i, dev in enumerate(["cpu", "NVIDIA H200"]):
        for W in (2, 4):
            for dtype in (torch.bfloat16, torch.float16):
                key = cache.make_key("gemm_ar", (8, 16, 32), str(dtype)[6:], W, dev)
                cache.put(key, {**entry, "method": "overlap", "time_us": 100 * i + 10 * W
                                + dtype.itemsize * (dtype == torch.float16)})
    for i, dev in enumerate(["cpu", "NVIDIA H200"]):
        monkeypatch.setattr(decisions, "_device_name", lambda dev=dev: dev)
        for W in (2, 4):
            for dtype in (torch.bfloat16, torch.float16):
                got = decisions.lookup("gemm_ar", 8, 16, 32, dtype, W)
                assert got.time_us == 100 * i + 10 * W + 2 * (dtype == torch.float16)
        assert decisions.lookup("gemm_ar", 8, 16, 32, torch.bfloat16, 3) is None
        assert decisions.lookup("gemm_ar", 8, 16, 32, torch.float32, 2) is None


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into a read-only folder")
def test_a_read_only_cache_dir_reads_and_refuses_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    cache.put("k", {"method": "fallback"})
    tmp_path.chmod(0o555)
    (tmp_path / (cache.FILE + ".lock")).chmod(0o444)
    try:
        assert cache.get("k") == {"method": "fallback"}
        with pytest.raises(cache.CacheError, match="cannot write the tuning cache .*: "
                                                   "Permission denied"):
            cache.put("k2", {"method": "overlap"})
    finally:
        tmp_path.chmod(0o755)
    assert cache.load() == {"k": {"method": "fallback"}}


def test_a_folder_it_cannot_create_files_in_raises_and_keeps_the_entries(tmp_path,
                                                                          monkeypatch):
    """A folder that takes no new file (read-only, as the test above for non-root users;
    here the denial is simulated): ``CacheError`` naming the file and why, the old
    entries kept, no temporary file left."""
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    cache.put("k", {"method": "fallback"})
    real_open = os.open

    def denied(path, *args, **kwargs):
        if os.path.basename(str(path)).startswith(".tune-"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(cache.os, "open", denied)
    with pytest.raises(cache.CacheError, match=f"cannot write the tuning cache {tmp_path}/"
                                               f"tune.json .*: Permission denied"):
        cache.put("k2", {"method": "overlap"})
    monkeypatch.setattr(cache.os, "open", real_open)
    assert cache.load() == {"k": {"method": "fallback"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.FILE, cache.FILE + ".lock"]


def test_a_missing_cache_dir_reads_as_empty_and_is_made_on_the_first_write(tmp_path,
                                                                          monkeypatch):
    missing = tmp_path / "not" / "yet"
    monkeypatch.setenv("DITRON_CACHE_DIR", str(missing))
    assert cache.load() == {} and cache.get("k") is None
    assert not (tmp_path / "not").exists()  # reading makes nothing
    cache.put("k", {"method": "fallback"})
    assert cache.get("k") == {"method": "fallback"}
    monkeypatch.setenv("DITRON_CACHE_DIR", "")  # empty: the default folder
    assert cache.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "ditron")


def test_decisions_survive_json():
    """Every decision the tuner can make reads back equal from the JSON it is cached as,
    and ``fits`` a zero-row GEMM only without a chunk split."""
    from ditron.tune import tuner

    rng = random.Random(0)
    configs = tuner.GPU_CANDIDATES + tuner.CPU_CANDIDATES

    def decision(graph: Decision | None = None) -> Decision:
        chunks = rng.choice([None, rng.randint(1, 99),
                             tuple(rng.randint(1, 50) for _ in range(rng.randint(1, 3)))])
        return Decision(rng.choice(["overlap", "fallback"]), rng.choice(configs),
                        rng.choice(["colocated", "copy_engine", "sm"]), rng.uniform(0, 1e4),
                        chunks, rng.randint(0, 64), graph)

    for _ in range(200):
        d = decision(decision() if rng.random() < 0.5 else None)
        assert Decision.from_json(json.loads(json.dumps(dataclasses.asdict(d)))) == d
    assert Decision("overlap").fits("gemm_rs", 0, 2)
    assert not Decision("overlap", chunk_rows=(1,)).fits("gemm_rs", 0, 2)


SPECS = (cost_model.H200, cost_model.H100, cost_model.H800, cost_model.GENERIC_GPU)


def test_the_cost_model_never_predicts_more_work_faster():
    """More rows, columns, depth, bytes per element, ranks (more of A or C moves), or a
    slower GEMM never lower any of the estimated times; zero sizes included."""
    rng = random.Random(0)
    fields = ("t_gemm", "t_comm", "t_overlap", "t_serial")
    for _ in range(3000):
        op = rng.choice(["ag_gemm", "gemm_rs", "gemm_ar"])
        spec = rng.choice(SPECS)
        size = dict(M=rng.choice([0, 1, rng.randint(0, 1 << 16)]),
                    N=rng.choice([0, 1, rng.randint(0, 1 << 16)]),
                    K=rng.choice([0, 1, rng.randint(0, 1 << 16)]),
                    world_size=rng.randint(1, 8), itemsize=rng.choice([1, 2, 4, 8]))
        slow = rng.choice([1.0, cost_model.FP32_SLOWDOWN, cost_model.SCALAR_LOADS_SLOWDOWN])
        base = cost_model.estimate(op, **size, spec=spec, gemm_slowdown=slow)
        assert all(getattr(base, f) >= 0 for f in fields)
        for name in ("M", "N", "K", "world_size", "itemsize"):
            more = dict(size)
            more[name] = (size[name] * 2 if name == "itemsize" and size[name] < 8 else
                          size[name] + (0 if name == "itemsize" else rng.randint(1, 4096)))
            bigger = cost_model.estimate(op, **more, spec=spec, gemm_slowdown=slow)
            for f in fields:
                assert getattr(bigger, f) >= getattr(base, f), (op, size, name, f)
        slower = cost_model.estimate(op, **size, spec=spec, gemm_slowdown=slow * 1.5)
        assert slower.t_overlap >= base.t_overlap and slower.t_serial == base.t_serial
    for op in ("ag_gemm", "gemm_rs", "gemm_ar"):  # nothing to move or multiply
        for spec in SPECS:
            zero = cost_model.estimate(op, 0, 0, 0, 4, 2, spec)
            assert zero.t_gemm == 0 and zero.t_comm == spec.latency
            assert not cost_model.overlap_pays(op, 0, 0, 0, 4, 2, "cuda", "NVIDIA H200")
