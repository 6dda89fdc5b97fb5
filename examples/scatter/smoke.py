"""Smoke test of an installed bt-scatter: device results against a float64 CPU reference.

Run as `python smoke.py` in an environment holding the wheel and the torch it was built for.
Every run draws fresh random inputs (the seed is printed, `--seed` replays it). On a machine
with a CUDA/ROCm GPU the device kernel is checked (output memory poisoned with NaN first, so
a kernel that skips zero-initialisation fails); the CPU op is checked everywhere.

Under `buildtools smoke` the runner says what it is: `BUILDTOOLS_SMOKE_DEVICE=cuda` (or
`rocm`) makes `--device cuda` the default, so a GPU runner's smoke fails when torch sees no
device instead of falling back to the CPU cases; and the cases that ran are written as JSON
to `$BUILDTOOLS_SMOKE_CASES` (schema `torch-buildtools/smoke-cases/v1`), which the runner's
report copies (the device, and which device cases ran).

Exit status: 0 all checks passed, 1 a result mismatched, 2 the installation is unusable
(import failure, missing kernel, a second copy of libtorch mapped, no device on a GPU runner).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# Normwise relative error bounds: max|out - ref| / max|ref|. 16-bit types are accumulated
# in float32 by both kernels, so their error is dominated by the final rounding.
TOLERANCES = {
    torch.float64: 1e-12,
    torch.float32: 5e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

# (rows, row shape, dim_size): empty, tiny, crowded buckets, wide rows, many buckets.
CPU_CASES = [
    (0, (), 4),
    (1, (), 1),
    (1000, (), 10),
    (10_000, (16,), 100),
    (200_000, (), 7),
    (100_000, (3, 4), 1000),
]
DEVICE_CASES = [*CPU_CASES, (10_000_000, (), 1000), (1_000_000, (8,), 100_000)]


@dataclass(frozen=True)
class Result:
    device: str
    dtype: str
    case: str
    rel_err: float
    tol: float

    @property
    def name(self) -> str:
        return f"{self.device:<4} {self.dtype:<8} {self.case}"

    @property
    def ok(self) -> bool:
        return self.rel_err <= self.tol  # NaN compares False: a poisoned output fails


def reference(src: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
    """float64 CPU reference through torch's own index_add_."""
    src64 = src.detach().to("cpu", torch.float64)
    out = torch.zeros((dim_size, *src64.shape[1:]), dtype=torch.float64)
    return out.index_add_(0, index.cpu(), src64)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if out.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    diff = (out.detach().to("cpu", torch.float64) - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1e-30)
    return float(diff / scale)


def poison_allocator(device: torch.device, shapes: list[tuple[int, ...]]) -> None:
    """Fill soon-to-be-reused blocks of the caching allocator with NaN, then release them."""
    if device.type == "cpu":
        return  # the CPU allocator does not cache: nothing to poison
    blocks = [torch.full(s, float("nan"), dtype=torch.float32, device=device) for s in shapes]
    blocks += [torch.full(s, float("nan"), dtype=torch.float64, device=device) for s in shapes]
    del blocks


def check_case(
    *,
    device: torch.device,
    dtype: torch.dtype,
    rows: int,
    row_shape: tuple[int, ...],
    dim_size: int,
    gen: torch.Generator,
) -> Result:
    import bt_scatter

    src = torch.randn((rows, *row_shape), generator=gen, dtype=torch.float64).to(dtype)
    index = torch.randint(0, dim_size, (rows,), generator=gen, dtype=torch.int64)
    ref = reference(src, index, dim_size)
    poison_allocator(device, [(dim_size, *row_shape)])
    out = bt_scatter.scatter_sum(src.to(device), index.to(device), dim_size)
    if device.type != "cpu":
        torch.cuda.synchronize(device)
    return Result(
        device=device.type,
        dtype=str(dtype).removeprefix("torch."),
        case=f"src={(rows, *row_shape)} dim_size={dim_size}",
        rel_err=rel_error(out, ref),
        tol=TOLERANCES[dtype],
    )


def check_errors(device: torch.device) -> list[str]:
    """Bad arguments must raise RuntimeError, not crash or return garbage."""
    import bt_scatter

    problems = []
    src = torch.ones(4, device=device)
    bad_calls = {
        "int32 index": (src, torch.zeros(4, dtype=torch.int32, device=device), 2),
        "index length": (src, torch.zeros(3, dtype=torch.int64, device=device), 2),
        "2-D index": (src, torch.zeros(4, 1, dtype=torch.int64, device=device), 2),
    }
    for what, args in bad_calls.items():
        try:
            bt_scatter.scatter_sum(*args)
        except RuntimeError:
            continue
        problems.append(f"{device.type}: {what}: no error raised")
    # Non-contiguous input: a transposed view must give the same result as its copy.
    # Small integers sum exactly, so the order of the GPU's atomics does not matter.
    base = torch.randint(-8, 8, (5, 64), device=device).float().t()
    index = torch.arange(64, device=device) % 3
    if not torch.equal(
        bt_scatter.scatter_sum(base, index, 3), bt_scatter.scatter_sum(base.contiguous(), index, 3)
    ):
        problems.append(f"{device.type}: non-contiguous src gives a different result")
    # Autograd (registered from Python on torch >= 2.4): d out / d src is a gather.
    if hasattr(torch.library, "register_autograd"):
        src64 = torch.randn(7, 3, dtype=torch.float64, device=device, requires_grad=True)
        idx = torch.tensor([0, 2, 1, 0, 2, 2, 3], device=device)
        if not torch.autograd.gradcheck(
            lambda s: bt_scatter.scatter_sum(s, idx, 4), (src64,), raise_exception=False
        ):
            problems.append(f"{device.type}: gradcheck failed")
    return problems


def libtorch_copies() -> dict[str, list[str]]:
    """libc10/libtorch_cpu libraries mapped from more than one file (auditwheel's -hash ignored)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return {}
    found: dict[str, set[str]] = {}
    for line in maps.read_text().splitlines():
        path = line.split()[-1]
        m = re.match(r"(libc10|libtorch_cpu)(-[0-9a-f]{8})?\.so", Path(path).name)
        if m and path.startswith("/"):
            found.setdefault(m[1], set()).add(path)
    return {name: sorted(paths) for name, paths in found.items() if len(paths) > 1}


def device_under_test(choice: str) -> torch.device | None:
    if choice == "cpu":
        return None
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return None


def default_device() -> str:
    """What `buildtools smoke` says to test (`BUILDTOOLS_SMOKE_DEVICE`): `cuda` for a GPU wheel
    on a GPU runner, `cpu` for a CPU wheel; run by hand, auto."""
    runner = os.environ.get("BUILDTOOLS_SMOKE_DEVICE", "")
    return {"cuda": "cuda", "rocm": "cuda", "cpu": "cpu"}.get(runner, "auto")


def write_cases(results: list[Result], device: torch.device | None) -> None:
    """What ran, for the runner's report (`$BUILDTOOLS_SMOKE_CASES`); nothing when unset."""
    path = os.environ.get("BUILDTOOLS_SMOKE_CASES")
    if not path:
        return
    described = None
    if device is not None:
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        kind = "rocm" if torch.version.hip else "cuda"
        described = {"type": kind, "name": torch.cuda.get_device_name(device), "capability": cap}
    cases = [
        {"device": r.device, "name": f"{r.dtype} {r.case}", "ok": r.ok, "rel_err": r.rel_err}
        for r in results
    ]
    data = {"schema": "torch-buildtools/smoke-cases/v1", "device": described, "cases": cases}
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default=default_device(),
        help="cuda: fail when torch sees no device (the default under a GPU runner's "
        "`buildtools smoke`); auto: the device when there is one, else the CPU only",
    )
    parser.add_argument("--seed", type=int, default=None, help="replay a previous run")
    args = parser.parse_args(argv)

    try:
        import bt_scatter
    except Exception as exc:  # an ImportError, or an undefined symbol surfacing as OSError
        print(f"smoke: FAIL: cannot import bt_scatter: {exc}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else secrets.randbits(48)
    device = device_under_test(args.device)
    if device is None and args.device == "cuda":
        print(
            "smoke: FAIL: --device cuda (a GPU runner) but torch sees no CUDA/ROCm device: "
            f"torch.cuda.is_available() is False (torch {torch.__version__})",
            file=sys.stderr,
        )
        return 2
    backend = "HIP" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU-only"
    print(f"bt_scatter {bt_scatter.__version__} from {Path(bt_scatter.__file__).parent}")
    print(f"torch {torch.__version__} ({backend}), Python {sys.version.split()[0]}, seed {seed}")
    if device is not None:
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        print(f"device: {torch.cuda.get_device_name(device)} (compute capability {cap})")
    else:
        print("device: none visible; checking the CPU op only")

    kernels = [key for key in ("CPU", "CUDA") if bt_scatter.has_kernel(key)]
    print(f"kernels: {', '.join(kernels) or 'none'}")
    copies = libtorch_copies()
    if copies:
        print(f"smoke: FAIL: a second libtorch is mapped: {copies}", file=sys.stderr)
        return 2
    if device is not None and not bt_scatter.has_kernel("CUDA"):
        print(
            "smoke: FAIL: a GPU is visible but this build of bt_scatter has no CUDA/HIP kernel "
            "(was it built without FORCE_CUDA=1 or without a toolkit?)",
            file=sys.stderr,
        )
        return 2

    gen = torch.Generator().manual_seed(seed)
    targets = [torch.device("cpu")] + ([device] if device is not None else [])
    results: list[Result] = []
    problems: list[str] = []
    started = time.perf_counter()
    for target in targets:
        cases = CPU_CASES if target.type == "cpu" else DEVICE_CASES
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            for rows, row_shape, dim_size in cases:
                results.append(
                    check_case(
                        device=target,
                        dtype=dtype,
                        rows=rows,
                        row_shape=row_shape,
                        dim_size=dim_size,
                        gen=gen,
                    )
                )
        problems += check_errors(target)

    width = max(len(r.name) for r in results)
    for r in results:
        status = "ok  " if r.ok else "FAIL"
        print(f"{status} {r.name:<{width}}  rel_err={r.rel_err:.3e}  tol={r.tol:.0e}")
    for problem in problems:
        print(f"FAIL {problem}")
    failed = [r for r in results if not r.ok]
    write_cases(results, device)
    on_device = [r for r in results if r.device != "cpu"]
    if device is not None:
        print(
            f"device cases: {len(on_device)} ran on {device} ({torch.cuda.get_device_name(device)})"
        )
    else:
        print("device cases: none (no device under test)")
    worst = max(results, key=lambda r: r.rel_err / r.tol)
    print(
        f"{len(results) - len(failed)}/{len(results)} cases passed in "
        f"{time.perf_counter() - started:.1f} s; worst {worst.name.strip()}: "
        f"max relative error {worst.rel_err:.3e} (tol {worst.tol:.0e})"
    )
    for target in targets:
        for dtype in TOLERANCES:
            name = str(dtype).removeprefix("torch.")
            errs = [r.rel_err for r in results if r.device == target.type and r.dtype == name]
            print(f"  {target.type:<4} {name:<8} max relative error {max(errs):.3e}")
    if failed or problems:
        print(f"smoke: FAIL (seed {seed}; replay with --seed {seed})", file=sys.stderr)
        return 1
    print("smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
