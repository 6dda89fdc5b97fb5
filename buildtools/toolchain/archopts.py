"""The arch options of nvcc and hipcc: the matrix's arch list in the compiler's form, and a
call's own arch options found and replaced (`arch_flags: enforce`, docs/matrix.md).

Standard library only: `toolchain.devicewrap`, run as a script by path, loads this file.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = [
    "DEVICE_SOURCES",
    "ENV_FLAGS",
    "cuda_arch_flags",
    "enforce_arch_flags",
    "rocm_arch_flags",
    "strip_arch_flags",
]

# nvcc's own environment options (`nvcc --help`), as toolchain.ccachekeys names them
ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
DEVICE_SOURCES = (".cu",)
# options naming the virtual and real archs: with a value after them or after '='
_NVCC_ARCH = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
_HIP_ARCH = ("--offload-arch", "--amdgpu-target")


def _arch_tokens(arch_list: str) -> list[str]:
    return [t for t in re.split(r"[;,\s]+", arch_list.strip()) if t]


def cuda_arch_flags(arch_list: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST as nvcc options, the way torch's cpp_extension writes them:
    '8.0;9.0a;12.0+PTX' → -gencode=arch=compute_80,code=sm_80 … code=compute_120."""
    flags: list[str] = []
    for token in _arch_tokens(arch_list):
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", token, re.IGNORECASE)
        if m is None:
            raise ValueError(f"{token!r} in {arch_list!r} is not a CUDA arch such as '9.0'")
        num = f"{m[1]}{m[2]}{m[3].lower()}"
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m[4]:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def rocm_arch_flags(arch_list: str) -> list[str]:
    """PYTORCH_ROCM_ARCH as hipcc options: 'gfx90a;gfx942' → --offload-arch=gfx90a …"""
    return [f"--offload-arch={t}" for t in _arch_tokens(arch_list)]


def strip_arch_flags(words: Sequence[str], kind: str = "nvcc") -> tuple[list[str], list[str]]:
    """(the words without arch options, the arch options removed, each as one string)."""
    names = _NVCC_ARCH if kind == "nvcc" else _HIP_ARCH
    kept: list[str] = []
    removed: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if word in names and i + 1 < len(words):
            removed.append(f"{word} {words[i + 1]}")
            i += 2
            continue
        joined = kind == "nvcc" and re.fullmatch(r"-arch(sm|compute)_\w+", word)
        if ("=" in word and name in names) or joined:
            removed.append(word)
        else:
            kept.append(word)
        i += 1
    return kept, removed


def _compiles_device_code(args: Sequence[str], kind: str) -> bool:
    """Whether a call compiles or device-links code (not `--version`, not a plain link)."""
    sources = (".cu", ".hip") if kind == "hipcc" else DEVICE_SOURCES
    return any(a.endswith(sources) for a in args) or any(
        a in ("-dlink", "--device-link", "-dc", "--device-c", "-rdc=true") for a in args
    )


def enforce_arch_flags(
    args: Sequence[str], env: Mapping[str, str], flags: Sequence[str], kind: str = "nvcc"
) -> tuple[list[str], dict[str, str], list[str]]:
    """(arguments, environment, what was removed) with the project's arch options replaced by
    `flags`. A call that compiles no device code and names no arch is left as it is."""
    kept, removed = strip_arch_flags(args, kind)
    new_env = dict(env)
    if kind == "nvcc":
        for name in ENV_FLAGS:
            if env.get(name):
                words, gone = strip_arch_flags(shlex.split(env[name]), kind)
                if gone:
                    new_env[name] = shlex.join(words)
                    removed += [f"{name}: {g}" for g in gone]
    if not removed and not _compiles_device_code(args, kind):
        return list(args), dict(env), []
    # what the cell's list holds too, however spelled ("-gencode arch=…" is "-gencode=arch=…"),
    # was not replaced
    same = {f.replace(" ", "=") for f in flags}
    return (
        [*kept, *flags],
        new_env,
        [r for r in removed if r.split(": ")[-1].replace(" ", "=") not in same],
    )
