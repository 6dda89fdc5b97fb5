"""CUDA op calls of a corpus wheel that ships no tests, checked against a reference.

Usage: python ops_check.py MODULE   (chamferdist | torch_scatter | torch_cluster | xformers)
Each check runs the extension's CUDA kernel and compares it with the same wheel's CPU kernel
or a plain-torch computation. Prints one line per check; exit 1 if any failed.
"""

import os
import sys
import time

import torch

FAILED = []
# OPS_DEVICE=cpu runs the same calls on the CPU kernels (a dry run of this script)
DEV = os.environ.get("OPS_DEVICE", "cuda")


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def chamferdist():
    from chamferdist import ChamferDistance

    g = torch.Generator().manual_seed(0)
    src = torch.rand(4, 2000, 3, generator=g)
    tgt = torch.rand(4, 1500, 3, generator=g)
    cd = ChamferDistance()
    a = src.clone().requires_grad_()
    ref = cd(a, tgt, bidirectional=True)
    ref.backward()
    b = src.to(DEV).requires_grad_()
    out = cd(b, tgt.to(DEV), bidirectional=True)
    out.backward()
    check(
        "chamfer forward cuda==cpu",
        torch.allclose(out.cpu(), ref, rtol=1e-4),
        f"{out.item():.6f} vs {ref.item():.6f}",
    )
    check("chamfer backward cuda==cpu", torch.allclose(b.grad.cpu(), a.grad, rtol=1e-3, atol=1e-6))
    # plain-torch reference for the forward
    d = torch.cdist(src.double(), tgt.double()) ** 2
    plain = (d.min(2).values.sum(1).mean() + d.min(1).values.sum(1).mean()).float()
    check(
        "chamfer forward == cdist reference",
        torch.allclose(out.detach().cpu(), plain, rtol=1e-4),
        f"{plain.item():.6f}",
    )


def torch_scatter():
    from torch_scatter import scatter, scatter_max, segment_csr

    g = torch.Generator().manual_seed(0)
    src = torch.randn(100_000, 16, generator=g)
    index = torch.randint(0, 1000, (100_000,), generator=g)
    for reduce in ("sum", "mean", "max", "min", "mul"):
        s = src if reduce != "mul" else (1 + 0.01 * src)
        out = scatter(s.to(DEV), index.to(DEV), dim=0, dim_size=1000, reduce=reduce).cpu()
        ref = torch.zeros(1000, 16).scatter_reduce(
            0,
            index[:, None].expand_as(s),
            s,
            {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin", "mul": "prod"}[reduce],
            include_self=False,
        )
        check(
            f"scatter {reduce} cuda == torch.scatter_reduce",
            torch.allclose(out, ref, rtol=1e-4, atol=1e-4),
        )
    out, arg = scatter_max(src.to(DEV), index.to(DEV), dim=0, dim_size=1000)
    check(
        "scatter_max argmax points at the max",
        torch.equal(src[arg.cpu(), torch.arange(16)], out.cpu()),
    )
    order = index.argsort()
    indptr = torch.zeros(1001, dtype=torch.long)
    indptr[1:] = torch.bincount(index, minlength=1000).cumsum(0)
    seg = segment_csr(src[order].to(DEV), indptr.to(DEV), reduce="sum").cpu()
    check(
        "segment_csr sum cuda == scatter sum cpu",
        torch.allclose(seg, scatter(src, index, dim=0, dim_size=1000), rtol=1e-4, atol=1e-4),
    )
    x = src.to(DEV).requires_grad_()
    scatter(x, index.to(DEV), dim=0, reduce="mean").sum().backward()
    counts = torch.bincount(index, minlength=1000).float()
    check(
        "scatter mean backward",
        torch.allclose(x.grad.cpu(), (1 / counts[index])[:, None].expand(-1, 16)),
    )


def torch_cluster():
    from torch_cluster import fps, grid_cluster, knn, nearest, radius, random_walk

    g = torch.Generator().manual_seed(0)
    x = torch.rand(5000, 3, generator=g)
    y = torch.rand(500, 3, generator=g)
    d = torch.cdist(y.double(), x.double())
    row, col = knn(x.to(DEV), y.to(DEV), 8).cpu()
    got = torch.zeros(500, 5000, dtype=torch.bool)
    got[row, col] = True
    want = torch.zeros_like(got)
    want.scatter_(1, d.topk(8, largest=False).indices, True)
    check("knn cuda == cdist top-k", torch.equal(got, want), f"{int((got != want).sum())} differ")
    row, col = radius(x.to(DEV), y.to(DEV), 0.1, max_num_neighbors=5000).cpu()
    got = torch.zeros(500, 5000, dtype=torch.bool)
    got[row, col] = True
    within = d <= 0.1
    border = (d - 0.1).abs() < 1e-6
    check(
        "radius cuda == cdist <= r",
        torch.equal(got & ~border, within & ~border),
        f"{int(got.sum())} pairs",
    )
    idx = fps(x.to(DEV), ratio=0.1, random_start=False).cpu()
    ref = fps(x, ratio=0.1, random_start=False)
    check("fps cuda == fps cpu", torch.equal(idx, ref), f"{len(idx)} points")
    pos = torch.rand(10_000, 2, generator=g) * 10
    size = torch.tensor([1.0, 1.0])
    check(
        "grid_cluster cuda == cpu",
        torch.equal(grid_cluster(pos.to(DEV), size.to(DEV)).cpu(), grid_cluster(pos, size)),
    )
    n = nearest(x.to(DEV), y.to(DEV)).cpu()
    check(
        "nearest cuda == cdist argmin",
        torch.equal(n, torch.cdist(x.double(), y.double()).argmin(1)),
    )
    edges = torch.randint(0, 1000, (2, 20_000), generator=g)
    edges = torch.unique(edges, dim=1)
    row, col = edges
    start = torch.arange(1000)
    walks = random_walk(row.to(DEV), col.to(DEV), start.to(DEV), walk_length=10).cpu()
    edge_set = set(map(tuple, edges.t().tolist()))
    deg = torch.bincount(row, minlength=1000)
    ok = all(
        (a, b) in edge_set or (a == b and deg[a] == 0)
        for w in walks.tolist()
        for a, b in zip(w, w[1:], strict=False)  # noqa: RUF007 (runs on any Python 3)
    )
    check("random_walk cuda follows edges", ok and walks.shape == (1000, 11))


def _attention_reference(q, k, v):
    # [batch, seq, heads, dim] like xformers; float32 softmax(q k^T / sqrt(d)) v
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))
    w = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)
    return (w @ v).transpose(1, 2)


def _try(name, fn):
    try:
        fn()
    except Exception as e:  # reported as a failed check; the run goes on
        check(name, False, f"{type(e).__name__}: {e}")


def xformers():
    # the compiled ops of an xformers wheel built without flash-attention: attention runs
    # torch's own CUTLASS/flash kernels; 2:4 sparsity and SwiGLU are xformers' .cu files
    import xformers.ops as xops
    from xformers.ops import sp24, swiglu_op

    g = torch.Generator().manual_seed(0)

    def attention():
        q, k, v = (torch.randn(2, 256, 4, 64, generator=g) for _ in range(3))
        qd, kd, vd = (t.to(DEV, torch.float16).requires_grad_() for t in (q, k, v))
        out = xops.memory_efficient_attention(qd, kd, vd)
        ref = _attention_reference(q, k, v)
        err = (out.float().cpu() - ref).abs().max().item()
        check("memory_efficient_attention forward == reference", err < 2e-2, f"max err {err:.2e}")
        out.float().sum().backward()
        qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
        _attention_reference(qr, kr, vr).sum().backward()
        gerr = max(
            (a.grad.float().cpu() - b.grad).abs().max().item()
            for a, b in zip((qd, kd, vd), (qr, kr, vr), strict=True)
        )
        check(
            "memory_efficient_attention backward == reference", gerr < 5e-2, f"max err {gerr:.2e}"
        )

    def sparse24():
        x = torch.randn(256, 256, generator=g).to(DEV, torch.float16)
        xs = sp24.sparsify24(x, backend=sp24.BACKEND_CUTLASS)  # sparse24_sparsify_both_ways
        dense = sp24.SparsifyApplyDenseOutput.OPERATOR(x, xs.threads_masks).float()
        kept = dense != 0
        rows = kept.view(256, 64, 4).sum(-1)
        cols = kept.t().reshape(256, 64, 4).sum(-1)
        check(
            "sparsify24 keeps at most 2 of every 4, both ways",
            bool((rows <= 2).all() and (cols <= 2).all()),
        )
        check("sparsify24 keeps the input's values", torch.equal(dense[kept], x.float()[kept]))
        if torch.cuda.get_device_capability()[0] != 8:
            # xformers' own limit: its sparse GEMM goes through torch._structured_sparse_linear
            print(
                "SKIP sparse24 GEMM: xformers supports it on compute capability 8.x only",
                flush=True,
            )
            return
        w = torch.randn(256, 128, generator=g).to(DEV, torch.float16)
        err = ((xs @ w).float() - dense @ w.float()).abs().max().item()
        check("sparse24 GEMM == dense GEMM of the pruned matrix", err < 0.5, f"max err {err:.2e}")

    def swiglu():
        x = torch.randn(512, 256, generator=g).to(DEV, torch.float16)
        # the packed op takes w1/w2 (and b1/b2) as views of one stacked tensor, as SwiGLU holds them
        w12 = torch.randn(2, 512, 256, generator=g).to(DEV, torch.float16) * 0.05
        b12 = torch.randn(2, 512, generator=g).to(DEV, torch.float16) * 0.05
        w3 = torch.randn(256, 512, generator=g).to(DEV, torch.float16) * 0.05
        b3 = torch.randn(256, generator=g).to(DEV, torch.float16) * 0.05
        args = (x, w12[0], b12[0], w12[1], b12[1], w3, b3)
        fused = xops.swiglu(*args, op=swiglu_op.SwiGLUPackedFusedOp)  # dual_gemm_silu
        eager = xops.swiglu(*args, op=swiglu_op.SwiGLUEagerOp)
        err = (fused.float() - eager.float()).abs().max().item()
        check("swiglu fused (dual GEMM) == eager", err < 5e-2, f"max err {err:.2e}")
        xr = x.clone().requires_grad_()
        xops.swiglu(xr, *args[1:], op=swiglu_op.SwiGLUPackedFusedOp).float().sum().backward()
        xe = x.clone().requires_grad_()
        xops.swiglu(xe, *args[1:], op=swiglu_op.SwiGLUEagerOp).float().sum().backward()
        gerr = (xr.grad.float() - xe.grad.float()).abs().max().item()
        check("swiglu fused backward == eager", gerr < 5e-2, f"max err {gerr:.2e}")

    _try("memory_efficient_attention", attention)
    _try("sparse24", sparse24)
    _try("swiglu", swiglu)


if __name__ == "__main__":
    name = sys.argv[1]
    mod = __import__(name)
    print(
        f"{name} {getattr(mod, '__version__', '?')} from {mod.__file__}; torch {torch.__version__}, {torch.cuda.get_device_name() if DEV == 'cuda' else DEV}",
        flush=True,
    )
    started = time.monotonic()
    globals()[name]()
    if DEV == "cuda":
        torch.cuda.synchronize()
    print(f"{name}: {len(FAILED)} failed in {time.monotonic() - started:.1f} s", flush=True)
    sys.exit(1 if FAILED else 0)
