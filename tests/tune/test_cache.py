"""The tuned-decision cache on disk: entries of concurrent writers survive, a bad file (or
one that cannot be opened) is treated as empty, a damaged entry as no decision; keys name
the topology where it is not one node."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing

import pytest

import ditron
from ditron.tune import cache

WRITERS, PUTS = 4, 30


def _write(directory: str, writer: int) -> None:
    import os

    os.environ["DITRON_CACHE_DIR"] = directory
    for i in range(PUTS):
        cache.put(f"op|{writer}x{i}|bf16|w2|cpu", {"writer": writer, "i": i})


def test_concurrent_writers_keep_every_entry(tmp_path):
    """Processes putting different keys at once (two jobs tuning side by side): the
    read-modify-write of one must not drop the other's entries."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write, args=(str(tmp_path), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = json.loads((tmp_path / cache.FILE).read_text())
    missing = [(w, i) for w in range(WRITERS) for i in range(PUTS)
               if data.get(f"op|{w}x{i}|bf16|w2|cpu") != {"writer": w, "i": i}]
    assert not missing, f"{len(missing)} of {WRITERS * PUTS} entries lost: {missing[:5]}"


def test_unreadable_file_reads_as_empty_and_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    (tmp_path / cache.FILE).write_bytes(b"\xff\xfe not json")
    assert cache.get("k") is None
    cache.put("k", {"method": "fallback"})
    assert cache.get("k") == {"method": "fallback"}
    (tmp_path / cache.FILE).write_text("[1, 2]")  # valid JSON, not a table of entries
    assert cache.load() == {}


def test_unreadable_location_reads_as_empty_and_a_write_says_where(tmp_path, monkeypatch):
    """A cache that cannot be opened (``DITRON_CACHE_DIR`` a file, ``tune.json`` a folder)
    reads as no decisions, as a damaged file does: ``load`` used to raise there, and with
    it every ``method="auto"`` TP GEMM and ``ditron info``. Writing there raises
    ``CacheError`` naming the file, and leaves no temporary file behind."""
    import pytest

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "file"))
    assert cache.load() == {} and cache.get("k") is None
    with pytest.raises(cache.CacheError, match=r"tune.json \(DITRON_CACHE_DIR\): .*file is "
                                               r"not a folder"):
        cache.put("k", {"method": "fallback"})
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "dir"))
    (tmp_path / "dir" / cache.FILE).mkdir(parents=True)
    assert cache.load() == {}
    with pytest.raises(cache.CacheError, match="cannot write the tuning cache"):
        cache.put("k", {"method": "fallback"})
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == [cache.FILE,
                                                                    cache.FILE + ".lock"]


def _entry(**changes) -> dict:
    from ditron.kernels.gemm import CPU_CONFIG

    entry = {"method": "overlap", "config": dataclasses.asdict(CPU_CONFIG),
             "engine": "copy_engine", "time_us": 12.5, "chunk_rows": None, "early_rows": 0,
             "graph": None}
    return {**entry, **changes}


DAMAGED = [5, "overlap", [1, 2], _entry(graph="g"), _entry(graph=_entry(graph=_entry())),
           _entry(method="overlapped"), _entry(engine=3), _entry(time_us="fast"),
           _entry(chunk_rows="x"), _entry(chunk_rows=0), _entry(chunk_rows=[4, -1]),
           _entry(chunk_rows=[]), _entry(early_rows=-1), _entry(early_rows=True),
           _entry(config={"block_m": 0}), _entry(config=[1]),
           # "false" read as a true flatten / tma_store
           _entry(config={**_entry()["config"], "flatten": "false"}),
           _entry(config={**_entry()["config"], "tma_store": 0}),
           # a time past float's range raised OverflowError, which ``lookup`` let through
           # (every "auto" call of the shape raised); inf and NaN are no time either
           _entry(time_us=10**400), _entry(time_us=float("inf")), _entry(time_us=float("nan"))]


def test_decisions_refuse_damaged_entries():
    """``Decision.from_json`` refuses what this version did not write (an entry that was
    no JSON object crashed it with ``AttributeError``, which ``lookup`` let through), and
    ``fits`` refuses knobs the op cannot take for the shape (a GEMM-RS split that does not
    sum to the segment, or ``early_rows`` past it), which crashed the op inside."""
    import pytest

    from ditron.tune.decisions import Decision

    for entry in DAMAGED:
        with pytest.raises((KeyError, TypeError, ValueError)):
            Decision.from_json(entry)
    split = Decision.from_json(_entry(chunk_rows=[12, 4], graph=_entry(chunk_rows=8)))
    assert split.chunk_rows == (12, 4) and split.graph.chunk_rows == 8
    assert split.fits("gemm_rs", 32, 2) and not split.fits("gemm_rs", 30, 2)
    assert not split.fits("ag_gemm", 32, 2)  # the AG-GEMM chunks a shard by one size
    assert not Decision.from_json(_entry(early_rows=16)).fits("gemm_rs", 32, 2)
    assert Decision.from_json(_entry(early_rows=15)).fits("gemm_rs", 32, 2)
    assert Decision.from_json(_entry(chunk_rows=5)).fits("ag_gemm", 32, 2)
    # early_rows needs the pushed engine and one chunk per segment (the op raises on more),
    # and an engine the op does not have (one removed since) is no decision either
    assert not Decision.from_json(_entry(early_rows=4, chunk_rows=8)).fits("gemm_rs", 32, 2)
    assert not Decision.from_json(_entry(early_rows=4, chunk_rows=[8, 8])).fits(
        "gemm_rs", 32, 2)
    assert Decision.from_json(_entry(early_rows=4, chunk_rows=16)).fits("gemm_rs", 32, 2)
    assert not Decision.from_json(_entry(early_rows=4, engine="copy_engine_pull")).fits(
        "gemm_rs", 32, 2)
    assert not Decision.from_json(_entry(engine="copy_engine_epilogue")).fits("gemm_rs", 32, 2)
    assert not Decision.from_json(_entry(engine="copy_engine")).fits("gemm_ar", 32, 2)
    assert not Decision.from_json(_entry(graph=_entry(early_rows=4, chunk_rows=4))).fits(
        "gemm_rs", 32, 2)


def _damaged_case(directory: str) -> list[bool]:
    import os

    import torch

    import ditron
    from ditron.tune import decisions

    os.environ["DITRON_CACHE_DIR"] = directory
    w = ditron.world()
    # the last: early_rows with two chunks per segment, which the op refuses (every "auto"
    # call raised ValueError naming arguments the caller never gave)
    cases = [("ag_gemm", (8, 12, 16), _entry(chunk_rows="x")),
             ("gemm_rs", (8, 12, 16), _entry(chunk_rows=[3, 3])), ("gemm_ar", (6, 12, 16), 5),
             ("gemm_rs", (8, 12, 12), _entry(chunk_rows=2, early_rows=1))]
    if w.rank == 0:
        for op, (M, N, K), damaged in cases:
            cache.put(decisions.key_for(op, M, N, K, torch.float32, 2), damaged)
    ditron.barrier()
    same = []
    for op, (M, N, K), _ in cases:
        assert decisions.lookup(op, M, N, K, torch.float32, 2) is None
        torch.manual_seed(w.rank)
        a = torch.randn(M // 2 if op == "ag_gemm" else M, K)
        b = torch.randn(N, K).t()  # laid out as the entries were tuned: a transposed weight
        same.append(torch.allclose(getattr(ditron.ops, op)(a, b), _tp_reference(op, a, b),
                                   rtol=1e-5, atol=1e-5))
    return same


def _tp_reference(op: str, a, b):
    """``op``'s result by torch and torch.distributed over the host group (float64)."""
    import torch
    import torch.distributed as dist

    from ditron.runtime.world import current

    host, w = current().host_group, ditron.world()
    a, b = a.double(), b.double()
    if op == "ag_gemm":
        parts = [torch.empty_like(a) for _ in range(w.world_size)]
        dist.all_gather(parts, a, group=host)
        return (torch.cat(parts) @ b).float()
    c = a @ b
    dist.all_reduce(c, group=host)
    return (c if op == "gemm_ar" else c.chunk(w.world_size)[w.rank]).float()


def test_auto_ops_run_past_damaged_entries(tmp_path):
    """``method="auto"`` with a damaged decision on disk decides as if none were cached (it
    raised on rank 0, inside the choice the other ranks wait for in a broadcast)."""
    import ditron

    assert ditron.launch(_damaged_case, 2, str(tmp_path), backend="cpu") == [[True] * 4] * 2


def _keys() -> str:
    import torch

    from ditron.tune.decisions import key_for

    key = key_for("gemm_rs", 64, 32, 16, torch.bfloat16, ditron.world().world_size)
    # the versions as this process took them (the sources' digest, read at its import)
    assert key.endswith(cache.versions())
    return key[:-len(cache.versions())]


@pytest.mark.parametrize("node_size", [None, "1", "2"])
def test_keys_name_the_topology_apart_from_one_node(node_size, monkeypatch):
    """A decision measured on nodes joined by the network does not carry over to one
    node (they shared a key); one node keeps the plain key (entries already cached)."""
    if node_size is not None:
        monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", node_size)
    keys = ditron.launch(_keys, 4, backend="cpu")
    suffix = "" if node_size is None else f", nodes of {node_size}"
    assert keys == [f"gemm_rs|64x32x16|bfloat16|w4|cpu{suffix}"] * 4


def test_the_cache_file_is_readable_like_any_file(tmp_path, monkeypatch):
    """Written through ``tempfile.mkstemp``, ``tune.json`` was private to its writer (mode
    0600): a cache shared by several users, or tuned under another one, read as empty to
    everyone else (so they ran untuned). It now takes the umask's mode, as a plain file."""
    import os

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    old = os.umask(0o022)
    try:
        cache.put("k", {"method": "fallback"})
        cache.put("k2", {"method": "overlap"})  # replacing the file keeps the mode
    finally:
        os.umask(old)
    assert (tmp_path / cache.FILE).stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.FILE, cache.FILE + ".lock"]


def test_a_broken_link_for_a_cache_dir_is_named(tmp_path, monkeypatch):
    """``DITRON_CACHE_DIR`` a link to nowhere: reads as empty; a write said only "File
    exists"."""
    (tmp_path / "cache").symlink_to(tmp_path / "gone")
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path / "cache"))
    assert cache.load() == {}
    with pytest.raises(cache.CacheError, match="cache is not a folder"):
        cache.put("k", {"method": "fallback"})


def test_a_write_keeps_a_file_it_cannot_read(tmp_path, monkeypatch):
    """``tune.json`` there but not readable to this process (another user's, mode 0600;
    simulated, as root reads anything): ``put`` read it as empty and replaced it with a
    table of its one entry, dropping every other decision. It now raises ``CacheError``
    and leaves the file as it was."""
    import builtins

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    cache.put("a", {"method": "fallback"})
    cache.put("b", {"method": "overlap"})
    before = (tmp_path / cache.FILE).read_bytes()

    def denied(path, *args, **kwargs):
        if str(path).endswith(cache.FILE):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(cache, "open", denied, raising=False)
    assert cache.load() == {}  # reads as no decisions, as documented
    with pytest.raises(cache.CacheError, match="exists and cannot be read .*Permission "
                                               "denied.*would drop its entries"):
        cache.put("c", {"method": "fallback"})
    monkeypatch.undo()
    assert (tmp_path / cache.FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [cache.FILE, cache.FILE + ".lock"]


def _layout_case(directory: str) -> list:
    import os

    import torch

    from ditron.ops import tp_gemm
    from ditron.tune import decisions

    os.environ["DITRON_CACHE_DIR"] = directory
    M, N, K = 8, 12, 16
    cfg = tp_gemm.default_config(ditron.world().device, torch.float32)
    if ditron.world().rank == 0:
        for layout, decision in (("t", decisions.Decision("overlap", cfg, "copy_engine_pull")),
                                 ("n", decisions.Decision("fallback", cfg))):
            cache.put(decisions.key_for("gemm_rs", M, N, K, torch.float32, 2, layout),
                      dataclasses.asdict(decision))
    ditron.barrier()
    a = torch.randn(M, K)
    seen = []
    for b in (torch.randn(N, K).t(), torch.randn(K, N), torch.randn(K, 2 * N)[:, ::2]):
        choice = tp_gemm._choose("gemm_rs", "auto", M, a, b, None)
        seen.append((choice.overlap, choice.engine) if choice.tuned else "untuned")
    return seen


def test_decisions_are_kept_per_layout_of_b(tmp_path):
    """The tuner times ``b`` as a transposed weight; a row-major ``b`` took that decision
    (cuBLAS's and the tiles' speeds differ with the layout). Each layout reads its own
    entry now, and a ``b`` strided along both dimensions (which the tuner never times) the
    cost model."""
    got = ditron.launch(_layout_case, 2, str(tmp_path), backend="cpu")
    assert got == [[(True, "copy_engine_pull"), (False, "colocated"), "untuned"]] * 2


def test_b_layout_and_versions_in_keys(monkeypatch):
    """``b_layout`` classifies by the unit stride (a dimension of one reads as the
    transposed weight); keys carry the triton and torch versions, so a decision measured
    with other versions is tuned again rather than reused."""
    import torch
    import triton

    from ditron.tune import decisions, tuner

    w = torch.randn(6, 4)
    assert [decisions.b_layout(b) for b in (w.t(), w, w[:, ::2], torch.randn(1, 5),
                                            torch.randn(5, 1))] == ["t", "n", "strided",
                                                                     "t", "t"]
    key = cache.make_key("gemm_rs", (8, 4, 2), "bfloat16", 2, "cpu", "b row-major")
    assert key.startswith("gemm_rs|8x4x2|bfloat16|w2|cpu|b row-major|")
    assert f"triton {triton.__version__}" in key and f"torch {torch.__version__}" in key
    with pytest.raises(ValueError, match="layout must be one of t, n"):
        ditron.launch(tuner.tune, 1, "gemm_rs", 8, 4, 2, torch.float32, layout="strided",
                      backend="cpu")


def test_a_lock_file_another_user_made_serves(tmp_path, monkeypatch):
    """Users sharing a cache folder: the first one's ``tune.json.lock`` (mode 0644 under
    the usual umask) cannot be opened for writing by the others (simulated, as root opens
    anything); ``put`` opened it to append, so no one but its maker could tune there. A
    read-only descriptor is all ``flock`` needs; concurrent writers still keep every
    entry (``test_concurrent_writers_keep_every_entry``)."""
    import builtins
    import os

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    cache.put("a", {"method": "fallback"})
    lock = str(tmp_path / (cache.FILE + ".lock"))
    real_open = os.open

    def denied(path, mode="r", *args, **kwargs):  # builtins.open for writing
        if str(path) == lock and any(c in mode for c in "wax+"):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, mode, *args, **kwargs)

    def denied_fd(path, flags, *args, **kwargs):  # os.open for writing
        if str(path) == lock and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(cache, "open", denied, raising=False)
        patched.setattr(cache.os, "open", denied_fd)
        cache.put("b", {"method": "overlap"})
    assert cache.load() == {"a": {"method": "fallback"}, "b": {"method": "overlap"}}


def test_a_tilde_in_the_cache_dir_is_the_home_folder(tmp_path, monkeypatch):
    """``DITRON_CACHE_DIR=~/ditron-cache`` set where no shell expands it (a systemd unit,
    a Docker ``ENV``): the cache went to a folder literally named ``~`` in the working
    directory, and ``ditron info`` named that path."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("DITRON_CACHE_DIR", "~/ditron-cache")
    assert cache.cache_dir() == str(home / "ditron-cache")
    cache.put("k", {"method": "fallback"})
    assert json.loads((home / "ditron-cache" / cache.FILE).read_text()) == {
        "k": {"method": "fallback"}}
    assert cache.get("k") == {"method": "fallback"}
    assert list(cwd.iterdir()) == []
