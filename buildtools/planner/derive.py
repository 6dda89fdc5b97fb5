"""What a job's fields derive from a torch version: labels, Requires-Dist, arch lists.

Small pure functions the planner and the doctor share: the doctor names the wheel that
matches an installed torch with the same label template the planner gave it.
"""

from __future__ import annotations

__all__ = [
    "abi_window",
    "arch_list_from_torch",
    "build_candidates",
    "current_local_version",
    "local_version",
    "requires_dist",
    "target_version_hex",
    "window_build",
]

from collections.abc import Sequence

from packaging.version import Version

from ..knowledge import Knowledge
from ..model import BuildJob


def local_version(template: str, *, torch: str, accelerator: str, abi: str) -> str:
    """The local version label of a wheel: 'pt{torch_major}{torch_minor}{accelerator}' → 'pt211cu130'."""
    v = Version(torch)
    return template.format(
        torch_major=v.major,
        torch_minor=v.minor,
        torch_patch=v.micro,
        accelerator=accelerator,
        abi=abi.replace("-", ""),
    )


def current_local_version(
    template: str,
    *,
    torch: str,
    accelerator: str,
    abi: str,
    release: bool,
    git_short: str | None,
) -> str:
    """The label of a wheel built against the running torch: the template's plus a suffix.

    '.local' for a release torch ('pt213cpu.local': built here, not the index's
    'pt213cpu' wheel), '.git<rev>' for a source, nightly or vendor build whose git
    revision is known ('pt213cpu.git1a2b3c4'), '.local' otherwise.
    """
    suffix = f"git{git_short}" if git_short and not release else "local"
    return f"{local_version(template, torch=torch, accelerator=accelerator, abi=abi)}.{suffix}"


def arch_list_from_torch(archs: Sequence[str], kind: str) -> str | None:
    """torch.cuda.get_arch_list() as an arch list: ['sm_80', 'sm_90', 'compute_90'] → '8.0;9.0+PTX'."""
    if kind == "rocm":
        gfx = [a.split(":", 1)[0] for a in archs if a.startswith("gfx")]
        return ";".join(dict.fromkeys(gfx)) or None
    entries: dict[str, bool] = {}
    for arch in archs:
        prefix, _, number = arch.partition("_")
        suffix = number[-1] if number[-1:] in ("a", "f") else ""
        digits = number.removesuffix(suffix)
        if prefix not in ("sm", "compute") or not digits.isdigit() or len(digits) < 2:
            continue
        name = f"{digits[:-1]}.{digits[-1]}{suffix}"
        entries[name] = entries.get(name, False) or prefix == "compute"
    return ";".join(f"{n}+PTX" if ptx else n for n, ptx in entries.items()) or None


def requires_dist(abi: str, torch: str, *, exact: bool = False, newest: str | None = None) -> str:
    """The wheel's `Requires-Dist` on torch, for a build against `torch`.

    Per-python and abi3 wheels hold torch's C++ ABI: the minor is pinned. A stable-ABI
    wheel claims the torch releases its job covers, from `torch` to `newest` (default:
    `torch`), and no more: those are the ones its smoke tests prove, so the range is
    `>=oldest minor,<the minor after the newest` (the ABI window, proven not assumed).
    `exact`: a pre-release, source or vendor torch matches no `==X.Y.*` (pre-releases are
    excluded), so its exact public version is pinned instead.
    """
    v = Version(torch)
    if abi == "stable" and not exact:
        top = Version(newest) if newest else v
        return f"torch>={v.major}.{v.minor},<{top.major}.{top.minor + 1}"
    if exact:
        return f"torch=={v.public}"
    return f"torch=={v.major}.{v.minor}.*"


def target_version_hex(torch: str) -> str:
    """TORCH_TARGET_VERSION of the stable ABI: '2.10.0' → '0x020a000000000000'."""
    v = Version(torch)
    return f"0x{v.major:02x}{v.minor:02x}{v.micro:02x}0000000000"


def abi_window(job: BuildJob) -> tuple[tuple[str, str], ...]:
    """Where each torch release a stable-ABI job claims is proven: (torch, where).

    A CPU runner installs every claimed torch in a fresh environment (`buildtools smoke`
    tests a stable wheel on each); a GPU runner tests the torch it can install, its own
    when it is offline (`--system-torch`); a family without a smoke runner proves nothing
    and is never published. Other ABI modes claim one torch: the build's.
    """
    if job.abi != "stable":
        return ()
    label = job.smoke_runner
    runner = ", ".join(label) if isinstance(label, tuple) else label
    out = []
    for torch in job.torch_versions:
        if not runner:
            where = "not proven: no smoke runner for this family (never published)"
        elif job.accelerator.kind == "cpu":
            where = f"smoke on {runner}, a fresh environment with torch {torch}"
        else:
            where = (
                f"smoke on {runner} where it can install torch {torch} (an offline runner "
                "proves only its own torch)"
            )
        out.append((torch, where))
    return tuple(out)


def build_candidates(job: BuildJob, kb: Knowledge) -> tuple[tuple[str, str], ...]:
    """The torch a job may be compiled with, in the order to try: (release, requirement).

    A stable-ABI job is built once for its whole window with any release of it: every
    release of the window, newest first (the field builds with the newest headers and sets
    `TORCH_TARGET_VERSION` to the floor, which the job's environment already names), each
    pinned to its build for the job's accelerator, so that a release whose build for the
    accelerator cannot be had is refused by the installer before any download: `+cpu`, the
    PyPI default where its CUDA is the accelerator's (`pypi_cuda`), else `+cuXYZ` /
    `+rocmX.Y`. Any other job is built with its own torch, as planned.
    """
    if job.abi != "stable" or job.torch_source != "index" or len(job.torch_versions) < 2:
        return ((job.torch, job.torch_requirement),)
    accel = job.accelerator
    out = []
    for torch in sorted(job.torch_versions, key=Version, reverse=True):
        pypi = kb.torch_release(torch).pypi_cuda
        if accel.kind == "cuda" and accel.version == pypi:
            out.append((torch, f"torch=={torch}"))
        else:
            out.append((torch, f"torch=={torch}+{accel.name}"))
    return tuple(out)


def window_build(job: BuildJob) -> str:
    """How a stable-ABI job's one wheel is built, in words (for `plan`)."""
    torches = sorted(job.torch_versions, key=Version, reverse=True)
    floor = torches[-1]
    target = dict(job.env).get("BUILDTOOLS_TORCH_TARGET_VERSION", target_version_hex(floor))
    return (
        f"built once, with the newest of {', '.join(torches)} whose {job.accelerator.name} "
        f"build installs, for the floor: TORCH_TARGET_VERSION={target} (torch {floor}); "
        f"one wheel serves {len(torches)} torch release(s)"
    )
