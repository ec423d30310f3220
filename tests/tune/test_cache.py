"""The tuned-decision cache on disk: entries of concurrent writers survive, a bad file is
treated as empty."""

from __future__ import annotations

import json
import multiprocessing

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
