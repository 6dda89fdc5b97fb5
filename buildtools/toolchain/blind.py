"""A CPU cell's build sees no CUDA or ROCm toolchain, whatever the machine has.

Many setup.py files decide whether to add a CUDA extension by probing the host: running
`nvcc` (torchsort, fast-transformers), reading `CUDA_HOME`, asking `nvidia-smi`. On a build
machine with a CUDA toolkit such a CPU cell adds the CUDA module and fails (a CPU torch has
no CUDA for cpp_extension: "CUDA_HOME environment variable is not set"), or, worse, builds a
wheel with a CUDA module that no CPU user can load. A CPU cell is therefore built where:

- none of the variables of `ecosystem.json` `device_env` is set (`CUDA_HOME`, `CUDA_PATH`,
  `ROCM_PATH`, `HIP_PATH`, `PYTORCH_NVCC`, CMake's `CUDACXX`, …);
- no directory of PATH holds a program of `device_programs` (`nvcc`, `hipcc`,
  `nvidia-smi`, …): such a directory (e.g. `/usr/local/bin` with an `nvcc` shim beside
  `docker` and `git`) is replaced by a directory of links to everything else it holds, made
  once per content under `mirror_root`, so the other tools stay where the build finds them.

What cannot be hidden this way: a fixed path such as `/usr/local/cuda` that a setup.py opens
by name (torch's cpp_extension only looks there with a CUDA torch, never in a CPU cell). The
docker backend's CPU images have no toolkit at all.

Standard library only (with `ecosystem`): the docker backend's in-container step uses it.
"""

from __future__ import annotations

__all__ = ["Blinded", "blind_path", "hide_device_toolchain"]

import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..ecosystem import load_ecosystem


@dataclass(frozen=True, kw_only=True)
class Blinded:
    """A build environment with no device toolchain, and what was hidden to make it."""

    env: dict[str, str]
    unset: tuple[str, ...]  # the variables removed
    # (PATH directory, its mirror, the programs it held), per directory replaced
    hidden: tuple[tuple[str, str, str], ...]

    def describe(self) -> str:
        """One line for the job's log ('' when nothing had to be hidden)."""
        parts = [f"unset {', '.join(self.unset)}"] if self.unset else []
        parts += [f"hid {programs} of {directory}" for directory, _, programs in self.hidden]
        return "; ".join(parts)

    def startup_line(self) -> str:
        """A `.pth` line that makes an interpreter's own environment what `env` is: the
        variables unset, each replaced PATH directory swapped for its mirror at startup (the
        docker backend's build interpreter, whose environment cibuildwheel sets)."""
        mirrors = {directory: mirror for directory, mirror, _ in self.hidden}
        return (
            f"import os; [os.environ.pop(k, None) for k in {self.unset!r}]; "
            f"os.environ['PATH'] = os.pathsep.join({mirrors!r}.get(d, d) for d in "
            "os.environ.get('PATH', '').split(os.pathsep))\n"
        )


def _entries(directory: str) -> list[str] | None:
    try:
        return sorted(p.name for p in Path(directory).iterdir())
    except OSError:
        return None


def _mirror(directory: str, names: list[str], hidden: frozenset[str], root: Path) -> Path:
    """A directory of links to `directory`'s entries less `hidden`, made once per content."""
    key = hashlib.sha256("\0".join([directory, *names]).encode()).hexdigest()[:20]
    mirror = root / key
    if mirror.is_dir():
        return mirror
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name in names:
        if name not in hidden:
            (tmp / name).symlink_to(Path(directory) / name)
    try:
        tmp.rename(mirror)
    except OSError:  # another build made it first: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return mirror


def blind_path(
    path: str, hidden: Iterable[str], *, mirror_root: Path
) -> tuple[str, tuple[tuple[str, str, str], ...]]:
    """PATH with every directory that holds a `hidden` program replaced by its mirror.

    Returns (the new PATH, (directory, mirror, the hidden programs it held) per replaced
    directory).
    """
    names = frozenset(hidden)
    out: list[str] = []
    replaced: list[tuple[str, str, str]] = []
    for directory in path.split(os.pathsep):
        entries = _entries(directory) if directory else None
        found = sorted(names.intersection(entries or ()))
        if not found or entries is None:
            out.append(directory)
            continue
        mirror = str(_mirror(str(Path(directory).absolute()), entries, names, mirror_root))
        out.append(mirror)
        replaced.append((directory, mirror, ", ".join(found)))
    return os.pathsep.join(out), tuple(replaced)


def hide_device_toolchain(env: Mapping[str, str], *, mirror_root: Path) -> Blinded:
    """`env` with no CUDA/ROCm toolchain visible: the device variables unset, the device
    programs off PATH (see the module docstring)."""
    eco = load_ecosystem()
    out = {k: v for k, v in env.items() if k not in eco.device_env}
    unset = tuple(k for k in eco.device_env if k in env)
    hidden: tuple[tuple[str, str, str], ...] = ()
    if env.get("PATH"):
        out["PATH"], hidden = blind_path(env["PATH"], eco.device_programs, mirror_root=mirror_root)
    return Blinded(env=out, unset=unset, hidden=hidden)
