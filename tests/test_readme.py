"""README's first kernel and overlapped ops, docs/developing.md's ring, docs/moe.md's
examples, docs/tp_gemm.md's ops, worked example and kernel of one's own, docs/collectives.md's
inbox consumer and docs/megakernel.md's examples run as printed (as scripts, on the backend
under test; a fragment with the names it uses defined around it)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_section(page: str, heading: str, tmp_path: Path, backend: str, before: str = "",
                 after: str = ""):
    """The first Python block after ``heading`` in ``page``, run as a script (between the
    code ``before`` and ``after``, for a fragment); the last line it prints, as a Python
    literal."""
    text = (ROOT / page).read_text()
    start = text.index(heading)
    code = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    return _run_script(textwrap.dedent(before) + code + textwrap.dedent(after), tmp_path,
                       backend)


def _run_in_main(page: str, heading: str, tmp_path: Path, backend: str, setup: str,
                 check: str, world_size: int = 2):
    """The first Python block after ``heading`` in ``page`` as the body of a ``main`` run on
    ``world_size`` ranks: after ``setup`` (the names the fragment uses), before ``check``
    (which returns what ``main`` does); the result by rank."""
    text = (ROOT / page).read_text()
    start = text.index(heading)
    block = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    # a block's own imports make ``torch`` and ``ditron`` local names of main: bound first
    script = (_PRELUDE + "\ndef main():\n    import torch, ditron\n"
              + textwrap.indent(textwrap.dedent(setup), "    ")
              + textwrap.indent(block, "    ") + textwrap.indent(textwrap.dedent(check), "    ")
              + f"\nif __name__ == '__main__':\n    print(ditron.launch(main, {world_size}))\n")
    return _run_script(script, tmp_path, backend)


#: torch references of the collectives, for the fragments run by :func:`_run_in_main`
_PRELUDE = textwrap.dedent("""
import torch, torch.distributed as dist, ditron

def gathered(t, dim=0):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return torch.cat(parts, dim)

def all_reduced(t):
    t = t.clone()
    dist.all_reduce(t)
    return t
""")


def _run_script(code: str, tmp_path: Path, backend: str):
    """``code`` run as a script; the last line it prints, as a Python literal."""
    script = tmp_path / "section.py"
    script.write_text(code)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # a user's shell: this process has the interpreter on for its own CPU-backend kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path,
                         env={**env, "PYTHONPATH": path, "DITRON_BACKEND": backend})
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_readme_first_kernel(tmp_path, backend):
    """Every rank reads its left neighbour's rank."""
    got = _run_section("README.md", "## A first kernel", tmp_path, backend)  # a list per rank
    assert got == [[float((r - 1) % 4)] * 16 for r in range(4)]


def test_moe_doc_mixtral_block(tmp_path, backend):
    """The expert-parallel layer equals the model's own experts on each rank's tokens, and
    the backward reaches the router."""
    got = _run_section("docs/moe.md", "## A Mixtral block, end to end", tmp_path, backend)
    assert len(got) == 2
    for err, router_grad in got:
        assert err < 1e-4 and router_grad is True, got


def test_tp_gemm_doc_worked_example(tmp_path, backend):
    """docs/tp_gemm.md's overlapped all-gather + GEMM equals ``all_gather(a) @ b``: three
    ranks, rows per rank not a multiple of the tile, repeated calls."""
    driver = """

    def main():
        import torch.distributed as dist
        w = ditron.world()
        torch.manual_seed(w.rank)
        a = torch.randn(5, 24, device=w.device)
        b = torch.randn(40, 24, device=w.device).t()          # a transposed weight
        parts = [torch.empty_like(a) for _ in range(w.world_size)]
        dist.all_gather(parts, a)
        ref = torch.cat(parts) @ b
        return [(my_ag_gemm(a, b) - ref).abs().max().item() for _ in range(3)]

    if __name__ == "__main__":
        print(ditron.launch(main, 3))
    """
    got = _run_section("docs/tp_gemm.md", "A worked example, an overlapped all-gather",
                       tmp_path, backend, after=driver)
    assert len(got) == 3 and max(max(errs) for errs in got) < 1e-4, got


def test_megakernel_doc_graph(tmp_path, backend):
    """docs/megakernel.md's graph in one minute: ``z`` is ``3 * x`` reversed."""
    got = _run_section("docs/megakernel.md", "## A graph in one minute", tmp_path, backend)
    assert got == [True]


def test_megakernel_doc_mlp_stack(tmp_path, backend):
    """docs/megakernel.md's stack of MLPs from ``nn.Linear`` shards computes what the page
    says: ``x_{i+1} = x_i + all_reduce(silu(x_i Wg) * (x_i Wu) Wd)``, each layer's input
    its residual."""
    before = """
    import torch, ditron
    from ditron import task as dt
    from ditron.task.tp_mlp import add_tp_mlp_stack

    def mlp(hidden, ffn):
        return torch.nn.ModuleDict({"gate": torch.nn.Linear(hidden, ffn, bias=False),
                                    "up": torch.nn.Linear(hidden, ffn, bias=False),
                                    "down": torch.nn.Linear(ffn, hidden, bias=False)})

    def main(tokens=4, hidden=32, ffn=64, layers=2):
        w = ditron.world()
        torch.manual_seed(0)  # the same model on every rank
        model = [mlp(hidden, ffn).to(w.device) for _ in range(layers)]
        cols = slice(w.rank * ffn // w.world_size, (w.rank + 1) * ffn // w.world_size)
        mlps = [mlp(hidden, ffn // w.world_size).to(w.device) for _ in range(layers)]
        with torch.no_grad():
            for m, s in zip(model, mlps):  # this rank's shards
                s.gate.weight.copy_(m.gate.weight[cols])
                s.up.weight.copy_(m.up.weight[cols])
                s.down.weight.copy_(m.down.weight[:, cols])
        tokens = torch.randn(tokens, hidden, device=w.device)
        x = torch.empty_like(tokens)
        graph = dt.TaskGraph("stack")
    """
    after = """
        with torch.no_grad():
            ref = tokens
            for m in model:
                ref = ref + m.down(torch.nn.functional.silu(m.gate(ref)) * m.up(ref))
        return (y - ref).abs().max().item() / ref.abs().max().item()

    if __name__ == "__main__":
        print(ditron.launch(main, 2))
    """
    # the page's block, indented into main()
    text = (ROOT / "docs/megakernel.md").read_text()
    start = text.index("`add_tp_mlp_stack(graph, x, weights)`")
    block = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    script = textwrap.dedent(before) + textwrap.indent(block, "    ") + textwrap.dedent(after)
    got = _run_script(script, tmp_path, backend)
    assert len(got) == 2 and max(got) < 1e-2, got


def test_readme_overlapped_ops(tmp_path, backend):
    """README's three blocks of "Overlapped ops" (the TP GEMMs and collectives, the
    ``ditron.nn`` layers, the MoE layer) run on two ranks and equal their torch references."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Overlapped ops"):]
    section = section[:section.index("\n## ")]
    ops, layers, moe = (textwrap.indent(block, "    ") for block in
                        re.findall(r"```python\n(.*?)```", section, re.S))
    script = _PRELUDE + textwrap.dedent("""
    def scattered(t):
        return all_reduced(t).chunk(dist.get_world_size())[dist.get_rank()]

    def inputs():
        wd = ditron.world()
        W, dev = wd.world_size, wd.device
        torch.manual_seed(0)  # the same weights on every rank
        n, d, K = 4 * W, 8, 16
        w, w2 = torch.randn(d, K, device=dev), torch.randn(d, K, device=dev)
        torch.manual_seed(1 + wd.rank)
        x_shard, h = torch.randn(3, K, device=dev), torch.randn(2 * W, K, device=dev)
        x, p = torch.randn(n, d, device=dev), torch.randn(n, d, device=dev)
        return W, dev, n, d, w, w2, x_shard, h, x, p

    def main():  # the blocks import ditron themselves: a local name there
        W, dev, n, d, w, w2, x_shard, h, x, p = inputs()
    """) + ops + textwrap.indent(textwrap.dedent("""
        errs = [(c - gathered(x_shard) @ w.t()).abs().max().item(),
                (y - scattered(h @ w2.t())).abs().max().item(),
                (g - gathered(x, 1)).abs().max().item(),
                (o - gathered(x)).abs().max().item(),
                (r - scattered(p)).abs().max().item()]
        h = 16
        x = torch.randn(2, 3, h, device=dev)
    """), "    ") + layers + textwrap.indent(textwrap.dedent("""
        errs.append(0.0 if tuple(y.shape) == (2, 3, h) else float("inf"))
        T, H, F, E, k = 6, 16, 24, 2 * W, 2
        x = torch.randn(T, H, device=dev)
        topk_ids = torch.randint(0, E, (T, k), device=dev)
        topk_weights = torch.rand(T, k, device=dev)
        w1, w2 = torch.randn(E // W, H, F, device=dev), torch.randn(E // W, F, H, device=dev)
    """), "    ") + moe + textwrap.indent(textwrap.dedent("""
        w1s, w2s = gathered(w1), gathered(w2)  # every expert, in expert order
        ref = sum(topk_weights[:, j, None] * torch.stack(
            [torch.relu(t @ w1s[e]) @ w2s[e] for t, e in zip(x, topk_ids[:, j])])
            for j in range(k))
        errs.append((out - ref).abs().max().item() / ref.abs().max().item())
        return errs
    """), "    ") + "\nif __name__ == '__main__':\n    print(ditron.launch(main, 2))\n"
    got = _run_script(script, tmp_path, backend)
    assert len(got) == 2 and max(max(errs) for errs in got) < 1e-4, got


def test_developing_ring(tmp_path, backend):
    """docs/developing.md's ring kernel with the host side its text gives: every rank reads
    its left neighbour's data, over repeated calls."""
    driver = """

    def main(N=16):
        import torch
        w = ditron.world()
        buf = ditron.zeros((2 * N,), torch.float32)
        pad = ditron.signal_pad("ring", 1)
        got = []
        for call in range(3):
            buf[:N] = torch.arange(N) + 100 * w.rank + call
            ditron.barrier()
            ring[(1,)](buf, pad.signals, pad.next_epoch(), N, ditron.context())
            ditron.check_waits()
            got.append(buf[N:].tolist())
            ditron.barrier()  # read before the left neighbour's next store
        return got

    if __name__ == "__main__":
        print(ditron.launch(main, 3))
    """
    got = _run_section("docs/developing.md", "## Writing a kernel that reaches other ranks",
                       tmp_path, backend, after=driver)
    assert got == [[[float(i + 100 * ((r - 1) % 3) + call) for i in range(16)]
                    for call in range(3)] for r in range(3)], got


def test_tp_gemm_doc_ops(tmp_path, backend):
    """docs/tp_gemm.md's first block: the three ops and ``return_gathered`` equal their torch
    references on three ranks."""
    setup = """
    wd = ditron.world()
    W = wd.world_size
    torch.manual_seed(0)  # the same weights on every rank
    w, w2 = torch.randn(12, 16, device=wd.device), torch.randn(10, 16, device=wd.device)
    torch.manual_seed(1 + wd.rank)
    x_shard, h = torch.randn(5, 16, device=wd.device), torch.randn(2 * W, 16, device=wd.device)
    """
    check = """
    ref = all_reduced(h @ w2.t())
    return [(c - gathered(x_shard) @ w.t()).abs().max().item(),
            (x_full - gathered(x_shard)).abs().max().item(),
            (y - ref.chunk(W)[wd.rank]).abs().max().item(), (z - ref).abs().max().item()]
    """
    got = _run_in_main("docs/tp_gemm.md", "# Overlapped tensor-parallel GEMMs", tmp_path,
                       backend, setup, check, world_size=3)
    assert len(got) == 3 and max(max(errs) for errs in got) < 1e-4, got


def test_tp_gemm_doc_own_kernel(tmp_path, backend):
    """docs/tp_gemm.md's kernel of one's own on the plan: the all-gather + RMS norm equals
    torch's on three ranks, rows per rank not filling a block, calls back to back (the
    shards' turns), without the heap growing after the second call."""
    driver = """

    def main():
        import torch.distributed as dist
        w = ditron.world()
        errs, used = [], []
        for call in range(4):
            torch.manual_seed(10 * call + w.rank)
            a = torch.randn(5, 24, device=w.device)
            parts = [torch.empty_like(a) for _ in range(w.world_size)]
            dist.all_gather(parts, a)
            full = torch.cat(parts)
            ref = full * torch.rsqrt(full.pow(2).mean(-1, keepdim=True) + 1e-6)
            errs.append((ag_rms_norm(a) - ref).abs().max().item())
            used.append(ditron.runtime.world.current().heap.used_bytes)
        return max(errs), used[1:] == [used[1]] * 3

    if __name__ == "__main__":
        print(ditron.launch(main, 3))
    """
    got = _run_section("docs/tp_gemm.md", "The same plan drives a Triton kernel of your own",
                       tmp_path, backend, after=driver)
    assert len(got) == 3 and all(err < 1e-5 and flat for err, flat in got), got


def test_moe_doc_layer(tmp_path, backend):
    """docs/moe.md's first block (GELU experts, ``rows_per_group``) equals the experts
    applied token by token, weighted by the router."""
    setup = """
    wd = ditron.world()
    W = wd.world_size
    T, H, F, E, k = 6, 16, 24, 2 * W, 2
    torch.manual_seed(1 + wd.rank)
    x = torch.randn(T, H, device=wd.device)
    topk_ids = torch.randint(0, E, (T, k), device=wd.device)
    topk_weights = torch.rand(T, k, device=wd.device)
    w1 = torch.randn(E // W, H, F, device=wd.device)
    w2 = torch.randn(E // W, F, H, device=wd.device)
    """
    check = """
    w1s, w2s = gathered(w1), gathered(w2)  # every expert, in expert order
    ref = sum(topk_weights[:, j, None] * torch.stack(
        [torch.nn.functional.gelu(t @ w1s[e]) @ w2s[e] for t, e in zip(x, topk_ids[:, j])])
        for j in range(k))
    return (out - ref).abs().max().item() / ref.abs().max().item()
    """
    got = _run_in_main("docs/moe.md", "# Expert parallelism", tmp_path, backend, setup, check)
    assert len(got) == 2 and max(got) < 1e-5, got


def test_collectives_doc_inbox(tmp_path, backend):
    """docs/collectives.md's ``all_to_all_inbox`` block, its consumer reading the rows where
    the comments say: the rows of ``all_to_all_device``, over repeated calls (the halves)."""
    setup = """
    wd = ditron.world()
    W, me = wd.world_size, wd.rank
    torch.manual_seed(me)
    y = torch.randn(7, 4, device=wd.device)
    idx = torch.randperm(7, device=wd.device)
    cuts = sorted(torch.randint(0, 8, (W - 1,)).tolist())
    splits = torch.tensor([b - a for a, b in zip([0] + cuts, cuts + [7])], device=wd.device)
    cap = 7 * W
    ref, ref_splits = ditron.ops.all_to_all_device(y, splits, cap, send_index=idx)
    n = int(ref_splits.sum())

    def my_kernel(rows, first, in_splits, y):  # the rows in source order, as the comments say
        f, sp, parts = int(first), in_splits.tolist(), []
        for q in range(W):
            if q == me:
                s = int(splits[:me].sum())
                parts.append(y[idx[s:s + sp[q]]])
            else:
                parts.append(rows[f + sum(sp[:q]):f + sum(sp[:q]) + sp[q]])
        return torch.cat(parts)

    errs = []
    for _ in range(3):
    """
    check = """
        errs.append((out - ref[:n]).abs().max().item() if n else 0.0)
    return max(errs)
    """
    text = (ROOT / "docs/collectives.md").read_text()
    block = re.search(r"```python\n(with ditron\.ops\.all_to_all_inbox.*?)```", text,
                      re.S).group(1)
    script = (_PRELUDE + "\ndef main():\n" + textwrap.indent(textwrap.dedent(setup), "    ")
              + textwrap.indent(block, "        ")
              + textwrap.indent(textwrap.dedent(check), "    ")
              + "\nif __name__ == '__main__':\n    print(ditron.launch(main, 3))\n")
    got = _run_script(script, tmp_path, backend)
    assert got == [0.0, 0.0, 0.0], got
