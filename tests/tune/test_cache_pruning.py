"""The tuning cache keeps the entries of the ``DITRON_CACHE_VERSIONS`` versions written
most recently: entries that other triton, torch or Ditron versions wrote (every upgrade,
every edit of a development checkout) were never dropped, so ``tune.json`` grew without
end. Writers of the versions kept, side by side, still lose nothing; the ops still read
the stamped entries; a bad setting is refused before anything is timed."""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import os
import time
import types

import pytest
import torch

import ditron
from ditron.runtime.config import SettingsError
from ditron.tune import cache

SHAPE = (8, 12, 16)


def _key(version: str | None = None, shape: tuple[int, ...] = SHAPE) -> str:
    """A key as ``make_key`` writes it, with ``version`` for the versions part (default:
    this process's)."""
    key = cache.make_key("gemm_rs", shape, "float32", 2, "cpu")
    return key if version is None else key[:key.rfind("|triton ")] + version


def _version(i: int) -> str:
    return f"|triton 3.0.{i}, torch 2.0.{i}, ditron 0.0.{i} ({i:012x})"


def test_a_write_keeps_the_versions_written_last_and_drops_the_others(tmp_path, monkeypatch):
    """Three versions kept: the writer's, then the two whose newest entry is latest; an
    older one and one whose entries carry no time (written before the stamps) go, and so do
    their every entry; keys without a versions part stay."""
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DITRON_CACHE_VERSIONS", "3")
    legacy = f"|triton {torch.__version__}, torch 2.0"  # keys before Ditron's own version
    planted = {_key(_version(1)): {"method": "fallback", cache.WRITTEN: 100.0},
               _key(_version(1), (8, 8, 8)): {"method": "fallback", cache.WRITTEN: 400.0},
               _key(_version(2)): {"method": "fallback", cache.WRITTEN: 300.0},
               _key(_version(3)): {"method": "fallback", cache.WRITTEN: 200.0},
               _key(_version(3), (4, 4, 4)): ["not", "a", "table"],  # damaged: no time
               _key(legacy): {"method": "overlap"},
               "unversioned": {"method": "fallback"}}
    (tmp_path / cache.FILE).write_text(json.dumps(planted))
    before = time.time()
    cache.put(_key(), {"method": "overlap"})
    data = json.loads((tmp_path / cache.FILE).read_text())
    assert sorted(data) == sorted([_key(), _key(_version(1)), _key(_version(1), (8, 8, 8)),
                                   _key(_version(2)), "unversioned"])
    stamp = data[_key()].pop(cache.WRITTEN)
    assert data[_key()] == {"method": "overlap"} and before - 0.01 <= stamp <= time.time() + 0.01
    # the writer's own version is kept even where it holds the oldest entries
    monkeypatch.setenv("DITRON_CACHE_VERSIONS", "1")
    cache.put(_key(_version(3)), {"method": "fallback"})
    assert sorted(cache.load()) == [_key(_version(3)), "unversioned"]


def test_successive_versions_leave_the_default_number_behind(tmp_path, monkeypatch):
    """Six versions tuning one after another (upgrades, or edits of a checkout): the file
    holds the last four's entries (``VERSIONS_KEPT``), and the running version's entries,
    stamped, still read as its decisions."""
    from ditron.kernels.gemm import GemmConfig
    from ditron.tune.decisions import Decision

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DITRON_CACHE_VERSIONS", raising=False)
    clock = itertools.count(1000)
    monkeypatch.setattr(cache, "time", types.SimpleNamespace(time=lambda: next(clock)))
    decision = Decision("overlap", GemmConfig(), "copy_engine_pull", 12.5, (3, 1))
    for i in range(6):
        monkeypatch.setattr(cache, "_VERSIONS", _version(i))
        for shape in (SHAPE, (16, 16, 16)):
            cache.put(_key(shape=shape), dataclasses.asdict(decision))
    assert cache.VERSIONS_KEPT == 4
    assert sorted({cache.version_of(k) for k in cache.load()}) == [_version(i)
                                                                    for i in range(2, 6)]
    assert len(cache.load()) == 8
    assert Decision.from_json(cache.get(_key())) == decision


def test_a_stamped_mlp_choice_still_serves(tmp_path, monkeypatch):
    """``add_tp_mlp``'s lookup reads the stamped entry ``tune_mlp`` writes."""
    from ditron.task import tp_mlp
    from ditron.tune import decisions

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(decisions, "_device_name", lambda: "cpu")
    blocks = tp_mlp.MlpBlocks(16, 32, 16, 32, 2)
    cache.put(decisions.key_for(tp_mlp.TUNED_OP, 16, 64, 32, torch.float32, 2),
              {"blocks": dataclasses.asdict(blocks), "time_us": 1.0})
    assert cache.WRITTEN in next(iter(cache.load().values()))
    assert tp_mlp.tuned_blocks(16, 64, 32, torch.float32, 2) == blocks


def _write(directory: str, version: str | None, writer: int, puts: int) -> None:
    """One writer of ``version`` (default the running one): another install sharing the
    folder where it is not the running one."""
    os.environ["DITRON_CACHE_DIR"] = directory
    os.environ["DITRON_CACHE_VERSIONS"] = "2"
    if version is not None:
        cache._VERSIONS = version
    for i in range(puts):
        cache.put(_key(shape=(writer, i)), {"writer": writer, "i": i})


def test_two_versions_writing_at_once_keep_every_entry(tmp_path):
    """Two installs of different versions tuning side by side, two processes each, with
    room for two versions: every entry either wrote survives the other's pruning (the
    pruning is inside the locked read-modify-write), the stale versions go."""
    stale = {_key(_version(i)): {"method": "fallback", cache.WRITTEN: float(i)}
             for i in range(1, 4)}
    (tmp_path / cache.FILE).write_text(json.dumps(stale))
    other = _version(9)
    ctx = multiprocessing.get_context("fork")
    writers = [(None, 0), (None, 1), (other, 2), (other, 3)]
    procs = [ctx.Process(target=_write, args=(str(tmp_path), v, w, 20)) for v, w in writers]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = json.loads((tmp_path / cache.FILE).read_text())
    want = {(cache.make_key("gemm_rs", (w, i), "float32", 2, "cpu") if v is None
             else _key(v, (w, i))): {"writer": w, "i": i}
            for v, w in writers for i in range(20)}
    missing = [k for k, e in want.items()
               if {f: x for f, x in data.get(k, {}).items() if f != cache.WRITTEN} != e]
    assert not missing, f"{len(missing)} of {len(want)} entries lost: {missing[:3]}"
    assert sorted(data) == sorted(want), "the stale versions were kept"


def test_a_killed_writers_temporary_file_is_removed(tmp_path, monkeypatch):
    """A writer killed between creating its temporary file and renaming it left the file
    for good; the next write (holding the lock, so no live writer's) removes it."""
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    (tmp_path / ".tune-12345-0badf00d.json").write_text('{"half')
    (tmp_path / "megakernels").mkdir()
    cache.put(_key(), {"method": "fallback"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [cache.FILE, cache.FILE + ".lock", "megakernels"])
    # one that cannot be removed (another user's, in a sticky folder) does not stop a write
    theirs = tmp_path / ".tune-999-0000beef.json"
    theirs.write_text("{")
    unlink = os.unlink

    def refuse(path, *args, **kwargs):
        if str(path) == str(theirs):
            raise PermissionError(1, "Operation not permitted", str(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse)
    cache.put(_key(shape=(1, 2)), {"method": "fallback"})
    assert theirs.exists() and len(cache.load()) == 2


def test_a_bad_setting_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    for value in ("0", "two", "-1"):
        monkeypatch.setenv("DITRON_CACHE_VERSIONS", value)
        with pytest.raises(SettingsError, match="DITRON_CACHE_VERSIONS must be an integer >= 1"):
            cache.put(_key(), {"method": "fallback"})
    assert not (tmp_path / cache.FILE).exists()


def _refused(directory: str) -> list[str]:
    """Rank 0 alone sets a bad ``DITRON_CACHE_VERSIONS``: both tuners refuse on every rank
    before timing (rank 0's write after the timing read it first, and raised alone)."""
    from ditron.task.tp_mlp_tuner import tune_mlp
    from ditron.tune.tuner import tune

    os.environ["DITRON_CACHE_DIR"] = directory
    if ditron.world().rank == 0:
        os.environ["DITRON_CACHE_VERSIONS"] = "0"
    messages = []
    for call in (lambda: tune("gemm_rs", 8, 12, 16, torch.float32, progress=False),
                 lambda: tune_mlp(16, 32, 64, torch.float32, progress=False)):
        with pytest.raises(ValueError) as info:
            call()
        messages.append(str(info.value))
    return messages


def test_tuners_refuse_a_bad_setting_on_every_rank(tmp_path):
    ranks = ditron.launch(_refused, 2, str(tmp_path), backend="cpu")
    assert all("DITRON_CACHE_VERSIONS must be an integer >= 1" in m for m in ranks[0])
    assert all("rank 0" in m and "DITRON_CACHE_VERSIONS" in m for m in ranks[1]), ranks[1]
    assert not (tmp_path / cache.FILE).exists()
