"""The compiler launcher of a distributing job: an unoptimized unit stays on this machine.

gcc's code at `-O0` depends on whether it compiles the original source or the preprocessed
text a build server gets (sccache sends the latter): in a function whose body comes from a
multi-line macro argument (torch's `AT_DISPATCH_*` lambdas, CUDA's `____nv_dummy_param_ref`)
the preprocessed text puts the whole expansion on one line, and gcc emits one `nop` more. So
a wheel whose `-O0` units compiled remotely differs from a local build by those bytes. With
optimization the objects are the same bytes either way (docs/distributed.md, "Where the
bytes do differ").

The masquerade entries of a distributing job (`c++`, `gcc`, … and nvcc's launcher) run this
file as a script (`python -I launcher.py KIND …`), stdlib only: it looks at the unit's
optimization level and calls sccache with either the real compiler or a link to it (under
another path) that the job's sccache config marks `no_dist`. sccache compiles a `no_dist`
unit here and still caches it; for nvcc only the host compile is kept here (its `-ccbin`),
the device code (cicc, ptxas of every arch) still goes to the cluster. Unless the device code
has line info (`-lineinfo`, `-G`): its line tables record each source file's mtime and size
where ptxas runs (0 and 0 on a server), so such a unit differs from a local build wherever
its host code compiles, and keeping that here would only cost the client its time.

    cc   SCCACHE OPTIMIZED UNOPTIMIZED ARGS…          (a C/C++ compiler)
    nvcc SCCACHE OPTIMIZED UNOPTIMIZED NVCC THREADS ARGS…   (OPTIMIZED/UNOPTIMIZED: -ccbin)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

# nvcc's options that hand their value to the host compiler
_TO_HOST = ("-Xcompiler", "--compiler-options")
# nvcc's options that put line tables into the device code, and ptxas' (through -Xptxas)
_LINE_INFO = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")
_TO_PTXAS = ("-Xptxas", "--ptxas-options")
_PTXAS_LINE_INFO = ("-lineinfo", "--generate-line-info", "-g", "--device-debug")
# what nvcc reads from its environment as more options (`nvcc --help`); the same as
# toolchain.ccachekeys.NVCC_ENV_FLAGS, which this stdlib-only script cannot import (a unit
# test holds the two equal)
_NVCC_FLAG_VARS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


def _level(word: str, level: str | None) -> str | None:
    """The optimization level after `word` ("" for a bare `-O`: gcc's -O1)."""
    return word[2:] if word.startswith("-O") else level


def host_optimized(args: Sequence[str], *, nvcc: bool) -> bool:
    """Whether the host compile of this command line optimizes (its last -O is not -O0).

    No -O at all is -O0, for gcc and for nvcc's host compile alike (nvcc's own `-O3` is the
    host compiler's). For nvcc, `-Xcompiler`/`--compiler-options` values count too, comma
    lists and the quotes torch's ninja file leaves around them included.
    """
    level: str | None = None
    i = 0
    while i < len(args):
        word = args[i].strip("'\"")
        host: str | None = None
        if nvcc and word in _TO_HOST and i + 1 < len(args):
            host, i = args[i + 1], i + 1
        elif nvcc and word.startswith(tuple(f"{o}=" for o in _TO_HOST)):
            host = word.split("=", 1)[1]
        elif nvcc and word == "--optimize" and i + 1 < len(args):
            level, i = args[i + 1], i + 1
        elif nvcc and word.startswith("--optimize="):
            level = word.split("=", 1)[1]
        else:
            level = _level(word, level)
        for part in (host or "").strip("'\"").split(","):
            level = _level(part.strip("'\""), level)
        i += 1
    return level is not None and level != "0"


def device_line_info(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether nvcc writes line tables into the device code, from its command line or the
    options its environment adds (values of -Xcompiler/--compiler-options are the host's)."""
    words = [*args]
    for var in _NVCC_FLAG_VARS:
        words += env.get(var, "").split()
    i = 0
    while i < len(words):
        word = words[i].strip("'\"")
        ptxas = ""
        if word in _TO_HOST:
            i += 2
            continue
        if word in _TO_PTXAS and i + 1 < len(words):
            ptxas, i = words[i + 1], i + 1
        elif word.startswith(tuple(f"{o}=" for o in _TO_PTXAS)):
            ptxas = word.split("=", 1)[1]
        elif word in _LINE_INFO:
            return True
        if any(p.strip("'\" ") in _PTXAS_LINE_INFO for p in ptxas.split(",")):
            return True
        i += 1
    return False


def command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """What to run for the launcher's arguments (see the module's docstring); `env`: the
    environment nvcc will see (this process's by default)."""
    kind, sccache, optimized, unoptimized, *rest = argv
    if kind == "cc":
        chosen = optimized if host_optimized(rest, nvcc=False) else unoptimized
        return [sccache, chosen, *rest]
    if kind == "nvcc":
        nvcc, threads, *args = rest
        remote = host_optimized(args, nvcc=True) or device_line_info(
            args, os.environ if env is None else env
        )
        chosen = optimized if remote else unoptimized
        head = [sccache, nvcc, *(["--threads", threads] if threads != "1" else [])]
        return [*head, "-ccbin", chosen, *args]
    raise SystemExit(f"launcher: unknown kind {kind!r}")


if __name__ == "__main__":
    run = command(sys.argv[1:])
    os.execv(run[0], run)
