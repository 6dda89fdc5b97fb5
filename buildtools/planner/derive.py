"""What a job's fields derive from a torch version: labels, Requires-Dist, arch lists.

Small pure functions the planner and the doctor share: the doctor names the wheel that
matches an installed torch with the same label template the planner gave it.
"""

from __future__ import annotations

__all__ = [
    "arch_list_from_torch",
    "current_local_version",
    "local_version",
    "requires_dist",
    "target_version_hex",
]

from collections.abc import Sequence

from packaging.version import Version


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


def requires_dist(abi: str, torch: str, *, exact: bool = False) -> str:
    """The wheel's `Requires-Dist` on torch, for a build against `torch`.

    Per-python and abi3 wheels hold torch's C++ ABI: the minor is pinned. Stable-ABI
    wheels run on the oldest torch and every later one. `exact`: a pre-release, source or
    vendor torch matches no `==X.Y.*` (pre-releases are excluded), so its exact public
    version is pinned instead.
    """
    v = Version(torch)
    if abi == "stable":
        return f"torch>={v.major}.{v.minor}"
    if exact:
        return f"torch=={v.public}"
    return f"torch=={v.major}.{v.minor}.*"


def target_version_hex(torch: str) -> str:
    """TORCH_TARGET_VERSION of the stable ABI: '2.10.0' → '0x020a000000000000'."""
    v = Version(torch)
    return f"0x{v.major:02x}{v.minor:02x}{v.micro:02x}0000000000"
