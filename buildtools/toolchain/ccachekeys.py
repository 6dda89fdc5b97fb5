"""How ccache keys a compile, the same for a local build and a container build.

- `CCACHE_NOHASHDIR`: with -g (Python's CFLAGS have it) ccache hashes the working
  directory; another checkout must hit (only the debug info's comp_dir differs).
- `CCACHE_COMPILERCHECK=content`: ccache's default identifies the compiler by its mtime and
  size. A container build installs nvcc (NVIDIA's PyPI toolkit) afresh in every container,
  so its mtime is new each time and every nvcc unit missed: an xformers rebuild after a
  one-`.cu` edit hit 11 of 31 units, all of them `c++` (the image's gcc keeps its mtime). The
  compiler's content is the same in every container and differs between toolkits, so it is
  the right key; hashing the driver binary costs milliseconds a compile.

sccache needs neither: it hashes the compiler's content, and its base directories stand
for the working directory (`SCCACHE_BASEDIRS`).

- `CCACHE_NAMESPACE` (`nvcc_flags_namespace`): nvcc reads NVCC_PREPEND_FLAGS and
  NVCC_APPEND_FLAGS itself, and ccache (4.7) does not hash them. Measured: a `.cu` file
  whose code depends on a macro, compiled again with `-DXYZ=1` in NVCC_APPEND_FLAGS, hit
  the first compile's object. buildtools puts flags there (prefix maps, the random seed)
  and a matrix's `build_env` may too, so a changed flag must not find an old object: the
  namespace is a hash of the flags that reach the output. Left out: `--threads N` and
  `--keep`/`--keep-dir D` (how fast, and where intermediate files go), and the old path of a
  prefix map (another checkout must hit; only the new path reaches the output). sccache
  (0.16) folds both variables into its own key.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping

__all__ = [
    "CCACHE_KEYING",
    "COMPILER_NAMES",
    "NVCC_ENV_FLAGS",
    "env_compiler_names",
    "masquerade_names",
    "nvcc_flags_namespace",
    "nvcc_launcher",
]

NVCC_ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
_NEUTRAL_WITH_VALUE = {"--threads", "-t", "--keep-dir", "-keep-dir"}
_NEUTRAL = re.compile(r"^(--?keep|--threads=.*|-t\d+|--?keep-dir=.*)$")
_PREFIX_MAP = re.compile(r"^(-f(?:file|debug|macro)-prefix-map=)[^=]*=(.*)$")

CCACHE_KEYING: tuple[tuple[str, str], ...] = (
    ("CCACHE_NOHASHDIR", "1"),
    ("CCACHE_COMPILERCHECK", "content"),
)


def _keyed(words: Iterable[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _NEUTRAL_WITH_VALUE:
            skip = True
        elif not _NEUTRAL.match(word):
            mapped = _PREFIX_MAP.match(word)
            out.append(mapped[1] + mapped[2] if mapped else word)
    return out


def nvcc_flags_namespace(env: Mapping[str, str]) -> dict[str, str]:
    """CCACHE_NAMESPACE for the nvcc flags `env` passes through the environment (appended
    to a namespace `env` sets); {} when there are none that reach the output."""
    parts = []
    for name in NVCC_ENV_FLAGS:
        value = env.get(name, "")
        try:
            words = shlex.split(value)
        except ValueError:  # an unbalanced quote: nvcc would fail on it anyway
            words = value.split()
        keyed = _keyed(words)
        if keyed:
            parts.append(f"{name}={chr(0).join(keyed)}")
    if not parts:
        return {}
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    base = env.get("CCACHE_NAMESPACE", "")
    return {"CCACHE_NAMESPACE": f"{base}-nvcc-{digest}" if base else f"nvcc-{digest}"}


def nvcc_launcher(tool: str, program: str, nvcc: str) -> list[str]:
    """PYTORCH_NVCC's words: `tool` in front of nvcc, and ccache in its depend mode there.

    On a miss, ccache's default mode runs the preprocessor once more to hash the
    preprocessed text before it compiles: for a `.cu` file, nvcc's whole host and device
    preprocessing, seconds per unit with torch's headers, paid by every cold build. Depend
    mode (`CCACHE_DEPEND`) instead hashes the source and every header of the dependency file
    the compile writes anyway: torch's ninja build gives nvcc `-MD -MF` (torch 2.11, 2.13
    and 2.14), whose file names every header, the system's and CUDA's included (checked
    with nvcc 13.0), so nothing goes unhashed. Only nvcc: torch compiles C++ files with
    `-MMD`, whose file leaves out system headers. A compile that writes no dependency file
    (setuptools without ninja) is in ccache's default mode.
    """
    if tool != "ccache":
        return [program, nvcc]
    return ["env", "CCACHE_DEPEND=1", program, nvcc]


# a C/C++ compiler's name as CC/CXX give it for a PATH lookup: `g++-12`, `clang++-17`,
# `x86_64-linux-gnu-gcc-12` (not a path, not another launcher such as `ccache`)
_COMPILER_NAME = re.compile(
    r"^(?:[A-Za-z0-9_.]+-)*(?:cc|c\+\+|gcc|g\+\+|clang|clang\+\+)(?:-[0-9][0-9.]*)?$"
)


# the C/C++ compilers a build finds on PATH by name (torch's ninja `c++`, setuptools' `gcc`…):
# the names a compiler cache's or a distributing job's masquerade directory holds
COMPILER_NAMES = ("cc", "c++", "gcc", "g++", "clang", "clang++")


def masquerade_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """COMPILER_NAMES and the ones CC/CXX give (`env_compiler_names`), each once."""
    return tuple(dict.fromkeys((*COMPILER_NAMES, *env_compiler_names(env))))


def env_compiler_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """The compiler names CC/CXX give without a path (their first word), for the masquerade
    directory: torch calls `$CXX` as given (ninja's `cxx`), so a `g++-12` there bypassed
    links named `c++`/`g++` only. Sorted, without duplicates; () when unset."""
    names: set[str] = set()
    for var in ("CC", "CXX"):
        try:
            words = shlex.split(env.get(var, ""))
        except ValueError:
            continue
        if words and _COMPILER_NAME.match(words[0]):
            names.add(words[0])
    return tuple(sorted(names))
