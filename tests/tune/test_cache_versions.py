"""A tuned decision serves only the code it was timed on: the cache keys carry Ditron's
version and a digest of its sources besides triton's and torch's, so a decision an older
Ditron cached (whose tiles or engines may have meant something else) is tuned again."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

import torch
import triton

import ditron
from ditron.tune import cache

from .test_tuned_alignment import _reference  # reduce_scatter(a @ b) through gloo

M, N, K = 8, 12, 16


def _older_keys(key: str) -> list[str]:
    """``key`` as an older Ditron wrote it: with triton's and torch's versions only, and
    with another digest of Ditron's sources."""
    head = key.split("|triton ")[0]
    plain = f"{head}|triton {triton.__version__}, torch {torch.__version__}"
    return [plain, f"{plain}, ditron 0.1.0 (000000000000)"]


def _older_case(directory: str) -> list:
    """Rank 0 plants a decision under the keys an older Ditron wrote; ``auto`` must not
    take it (the cost model decides), and its result must be right."""
    from ditron.ops import tp_gemm
    from ditron.tune import decisions

    os.environ["DITRON_CACHE_DIR"] = directory
    w = ditron.world()
    cfg = tp_gemm.default_config(w.device, torch.float32)
    key = decisions.key_for("gemm_rs", M, N, K, torch.float32, w.world_size)
    if w.rank == 0:
        for old in _older_keys(key):
            cache.put(old, dataclasses.asdict(decisions.Decision("overlap", cfg,
                                                                 "copy_engine_pull")))
    ditron.barrier()
    torch.manual_seed(w.rank)
    a, b = torch.randn(M, K), torch.randn(N, K).t()
    choice = tp_gemm._choose("gemm_rs", "auto", M, a, b, None)
    got = ditron.ops.gemm_rs(a, b)
    ok = torch.allclose(got.double(), _reference(a, b), rtol=1e-5, atol=1e-4)
    return [choice.tuned, decisions.lookup("gemm_rs", M, N, K, torch.float32, w.world_size),
            ok]


def test_a_decision_an_older_ditron_cached_is_not_reused(tmp_path):
    """The keys named triton and torch only: a decision cached by an older Ditron, whose
    kernels ran at other speeds or read its tile config otherwise, served ``auto`` silently
    after an upgrade (or a change in a development checkout)."""
    assert ditron.launch(_older_case, 2, str(tmp_path), backend="cpu") == [
        [False, None, True]] * 2


def test_the_source_digest_follows_the_code_the_ops_run(tmp_path):
    """A kernel's source changing changes the digest in the keys (a development install's
    version number does not change); a benchmark's does not (it is not what the ops run)."""
    package = os.path.dirname(os.path.abspath(ditron.__file__))
    copy = tmp_path / "ditron"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    digest = cache.source_digest(str(copy))
    assert digest == cache.source_digest()
    bench = next((copy / "benchmarks").glob("*.py"))
    bench.write_text(bench.read_text() + "\n# edited\n")
    assert cache.source_digest(str(copy)) == digest
    gemm = copy / "kernels" / "gemm.py"
    gemm.write_text(gemm.read_text().replace("block_n: int = 256", "block_n: int = 128", 1))
    changed = cache.source_digest(str(copy))
    assert changed != digest
    (copy / "kernels" / "new_kernel.py").write_text("")  # a file added counts too
    assert cache.source_digest(str(copy)) not in (digest, changed)
    # the keys carry the digest taken when the cache module was imported
    key = cache.make_key("gemm_rs", (M, N, K), "float32", 2, "cpu")
    assert key.endswith(cache.versions())
    assert re.fullmatch(rf"\|triton {re.escape(triton.__version__)}, torch "
                        rf"{re.escape(torch.__version__)}, ditron "
                        rf"{re.escape(ditron.__version__)} \([0-9a-f]{{12}}\)",
                        cache.versions())


def test_info_counts_the_decisions_this_version_reads(tmp_path, monkeypatch, capsys):
    """``ditron info`` counted every entry of ``tune.json``, those of other versions too,
    which no op reads."""
    from ditron import cli

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    key = cache.make_key("gemm_rs", (M, N, K), "float32", 2, "cpu")
    for k in (key, *_older_keys(key)):
        cache.put(k, {"method": "fallback"})
    assert cli.main(["info", "--backend", "cpu"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("tuned")]
    assert line == (f"tuned    1 decision (and 2 of other versions, unused) in "
                    f"{tmp_path / cache.FILE} (DITRON_CACHE_DIR)")
