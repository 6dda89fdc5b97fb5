"""CUDA op calls of a corpus wheel that ships no tests, checked against a reference.

Usage: python ops_check.py MODULE   (chamferdist | torch_scatter | torch_cluster)
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
