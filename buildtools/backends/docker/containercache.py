"""The compiler cache inside the builder container: sccache or ccache, as on the host.

Every builder image has both tools (docker/install-tools.sh) and, for each, a directory of
compiler-named links to it; the job's cache directory on the host is mounted read-write at
CONTAINER_CCACHE_DIR. The container's environment then does what the local backend does
(buildtools.wheelbuild.compilercache): the tool's links first on PATH (the caller adds
`masquerade(tool)` in front of the container's own PATH), nvcc through PYTORCH_NVCC,
torch >= 2.13's own wrapper off. With sccache, its server starts with the first compile on
a socket of the container and is stopped before the repair (`stop_words`), so its last
writes reach the mounted directory; nvcc's host compiler is the image's gcc by
NVCC_CCBIN (`ccbin_assignment`), looked up before the links lead PATH.
"""

from __future__ import annotations

__all__ = [
    "CONTAINER_CCACHE",
    "CONTAINER_CCACHE_DIR",
    "CONTAINER_SCCACHE",
    "GHA_CACHE_VARS",
    "cache_env",
    "ccbin_assignment",
    "masquerade",
    "stop_words",
]

import shlex

from ...toolchain.ccachekeys import CCACHE_KEYING, nvcc_launcher

CONTAINER_CCACHE_DIR = "/buildtools/ccache"  # the job's compiler cache (read-write)
CONTAINER_CCACHE = "/opt/buildtools/venv/bin/ccache"
CONTAINER_SCCACHE = "/opt/buildtools/venv/bin/sccache"
_MASQUERADE = {"ccache": "/opt/buildtools/ccache", "sccache": "/opt/buildtools/sccache"}
_PROGRAM = {"ccache": CONTAINER_CCACHE, "sccache": CONTAINER_SCCACHE}
_SCCACHE_UDS = "/tmp/buildtools/sccache.sock"
# cibuildwheel runs a $(…) of CIBW_ENVIRONMENT as an argv: the shell's lookup of gcc
_GCC_LOOKUP = "sh -c 'command -v gcc'"
# What sccache's GitHub Actions cache backend reads (docs/ci.md): passed into the container
# by name (never by value, so the runtime token is not printed with cibuildwheel's options)
# when the host has SCCACHE_GHA_ENABLED; the container then has a network (the backend is
# a web service), and pip still installs only the prefetched wheels.
GHA_CACHE_VARS = (
    "SCCACHE_GHA_ENABLED",
    "SCCACHE_GHA_VERSION",
    "SCCACHE_GHA_RW_MODE",
    "ACTIONS_RESULTS_URL",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_CACHE_URL",
    "ACTIONS_CACHE_SERVICE_V2",
)


def cache_env(tool: str, *, project: str, nvcc: str | None) -> list[tuple[str, str]]:
    """The container's variables for `tool` (`nvcc`: the container's nvcc, CUDA jobs)."""
    if tool == "sccache":
        env = [
            ("SCCACHE_DIR", CONTAINER_CCACHE_DIR),
            ("SCCACHE_BASEDIRS", project),  # the same path in every checkout
            ("SCCACHE_SERVER_UDS", _SCCACHE_UDS),
            ("TORCH_NO_COMPILER_WRAPPER", "1"),
            ("CCACHE_DISABLE", "1"),
        ]
    else:
        env = [
            ("CCACHE_DIR", CONTAINER_CCACHE_DIR),
            ("CCACHE_BASEDIR", project),
            *CCACHE_KEYING,  # nvcc is installed afresh in every container: by content
            ("TORCH_NO_COMPILER_WRAPPER", "1"),
        ]
    if nvcc is not None:
        env.append(("PYTORCH_NVCC", shlex.join(nvcc_launcher(tool, _PROGRAM[tool], nvcc))))
    return env


def masquerade(tool: str) -> str:
    """The image's directory of compiler-named links to `tool` (first on PATH)."""
    return _MASQUERADE[tool]


def ccbin_assignment() -> str:
    """The CIBW_ENVIRONMENT words naming nvcc's host compiler under sccache (before PATH)."""
    return f' NVCC_CCBIN="$({_GCC_LOOKUP})"'


def stop_words(tool: str | None) -> str:
    """The shell words that stop the container's sccache server (its statistics go to the
    log) before the repair; nothing for ccache or no cache."""
    if tool != "sccache":
        return ""
    return f"{CONTAINER_SCCACHE} --stop-server || true; "
