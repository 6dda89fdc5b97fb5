"""ccache keyed as buildtools keys it (`toolchain.ccachekeys`), with the real ccache and g++.

A container build installs nvcc afresh each time: the same bytes with a new mtime. With
ccache's default compiler check (mtime and size) every such unit missed; keyed by the
compiler's content it hits. The same is shown here with a copy of g++ "reinstalled".
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from buildtools.backends.docker.containercache import cache_env
from buildtools.toolchain.ccachekeys import CCACHE_KEYING, nvcc_flags_namespace, nvcc_launcher

CCACHE = shutil.which("ccache")
GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(
    CCACHE is None or GXX is None, reason="needs ccache and g++ on PATH"
)


def _stats(env: dict[str, str]) -> dict[str, int]:
    assert CCACHE is not None
    out = subprocess.run(
        [CCACHE, "--print-stats"], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    fields = (line.split("\t") for line in out.splitlines())
    return {f[0]: int(f[1]) for f in fields if len(f) == 2 and f[1].isdigit()}


def _install(compiler: Path, when: float) -> None:
    """A fresh install of a compiler driver (what a container's toolkit install gives): the
    same bytes, a new mtime. A driver script, as a copied g++ binary cannot find cc1plus."""
    assert GXX is not None
    compiler.unlink(missing_ok=True)
    compiler.write_text(f'#!/bin/sh\nexec {GXX} "$@"\n')
    compiler.chmod(0o755)
    os.utime(compiler, (when, when))


@pytest.mark.parametrize(("keying", "hits"), [(CCACHE_KEYING, 1), ((), 0)], ids=["ours", "default"])
def test_a_reinstalled_compiler_hits_the_cache(
    tmp_path: Path, keying: tuple[tuple[str, str], ...], hits: int
) -> None:
    assert CCACHE is not None
    compiler = tmp_path / "bin" / "g++"
    compiler.parent.mkdir()
    (tmp_path / "a.cpp").write_text("int answer() { return 42; }\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CCACHE_DIR": str(tmp_path / "cache"),
        "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf"),  # not the machine's settings
        **dict(keying),
    }
    for when in (1_700_000_000, 1_700_100_000):
        _install(compiler, when)
        subprocess.run(
            [CCACHE, str(compiler), "-c", "a.cpp", "-o", "a.o"],
            cwd=tmp_path, env=env, check=True, timeout=120,
        )  # fmt: skip
    stats = _stats(env)
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] == hits, stats
    assert stats["cache_miss"] == 2 - hits, stats


def test_container_and_local_builds_key_ccache_alike() -> None:
    container = dict(cache_env("ccache", project="/project", nvcc="/tmp/nvcc"))
    assert all(container[k] == v for k, v in CCACHE_KEYING)
    assert ("CCACHE_COMPILERCHECK", "content") in CCACHE_KEYING


NVCC = shutil.which("nvcc")
# code that depends on a macro NVCC_APPEND_FLAGS may set
MACRO_CU = "__global__ void k(int* x) {\n#ifdef XYZ\n  x[0] = 7;\n#else\n  x[0] = 5;\n#endif\n}\n"


@pytest.mark.skipif(NVCC is None, reason="needs nvcc on PATH (no GPU needed)")
@pytest.mark.parametrize(("namespaced", "hits"), [(True, 0), (False, 1)], ids=["ours", "default"])
def test_a_changed_nvcc_env_flag_misses_the_cache(
    tmp_path: Path, namespaced: bool, hits: int
) -> None:
    """ccache does not hash NVCC_APPEND_FLAGS (nvcc reads it): without the namespace a
    compile with `-DXYZ=1` there gets the object compiled without it."""
    assert CCACHE is not None and NVCC is not None
    (tmp_path / "k.cu").write_text(MACRO_CU)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CCACHE_DIR": str(tmp_path / "cache"),
        "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf"),
        **dict(CCACHE_KEYING),
    }
    for n, flags in enumerate(("--threads 2", "--threads 1 -DXYZ=1")):
        env = {**base, "NVCC_APPEND_FLAGS": flags}
        if namespaced:
            env.update(nvcc_flags_namespace(env))
        subprocess.run(
            [CCACHE, NVCC, "-c", "k.cu", "-o", f"k{n}.o", "-gencode", "arch=compute_90,code=sm_90"],
            cwd=tmp_path, env=env, check=True, timeout=300,
        )  # fmt: skip
    stats = _stats(base)
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] == hits, stats
    same = (tmp_path / "k0.o").read_bytes() == (tmp_path / "k1.o").read_bytes()
    assert same is (hits == 1)  # a hit is the stale object


@pytest.mark.skipif(NVCC is None, reason="needs nvcc on PATH (no GPU needed)")
@pytest.mark.parametrize("header", ["h/project.h", "sys/system.h"], ids=["project", "isystem"])
def test_nvcc_in_depend_mode_preprocesses_once_and_sees_every_header(
    tmp_path: Path, header: str
) -> None:
    """nvcc as buildtools launches it (`nvcc_launcher`: ccache's depend mode) with torch's
    ninja flags (`$nvcc -MD -MF $out.d`, torch 2.11 and 2.13): a miss runs no second preprocessing, an unchanged unit hits, and an edited
    header, a project's or one found through -isystem (which -MMD would leave out), misses."""
    assert CCACHE is not None and NVCC is not None
    for rel in ("h/project.h", "sys/system.h"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(f"#define VALUE_{rel[0].upper()} 5\n")
    (tmp_path / "k.cu").write_text(
        '#include "project.h"\n#include <system.h>\n'
        "__global__ void k(int* x) { x[0] = VALUE_H + VALUE_S; }\n"
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CCACHE_DIR": str(tmp_path / "cache"),
        "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf"),
        **dict(CCACHE_KEYING),
    }
    launcher = nvcc_launcher("ccache", CCACHE, NVCC)

    def compile_(out: str = "k.o") -> bytes:  # one name: the arguments are part of the key
        (tmp_path / f"{out}.d").unlink(missing_ok=True)  # as ninja does (deps = gcc)
        subprocess.run(
            [*launcher, "-MD", "-MF", f"{out}.d", "-Ih", "-isystem", "sys", "-c", "k.cu",
             "-o", out, "-gencode", "arch=compute_90,code=sm_90"],
            cwd=tmp_path, env=env, check=True, timeout=300,
        )  # fmt: skip
        return (tmp_path / out).read_bytes()

    first = compile_()
    assert _stats(env).get("preprocessed_cache_miss", 0) == 0  # depend mode: no -E run
    assert compile_() == first
    assert _stats(env)["direct_cache_hit"] == 1
    (tmp_path / header).write_text((tmp_path / header).read_text().replace("5", "7"))
    edited = compile_()
    stats = _stats(env)
    assert stats["direct_cache_hit"] == 1 and stats["cache_miss"] == 2, stats
    assert edited != first  # compiled again, with the edited header


@pytest.mark.skipif(NVCC is None, reason="needs nvcc on PATH (no GPU needed)")
def test_nvcc_without_depend_mode_preprocesses_again_on_a_miss(tmp_path: Path) -> None:
    """What depend mode saves: ccache's default mode runs nvcc -E before it compiles."""
    assert CCACHE is not None and NVCC is not None
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { x[0] = 5; }\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CCACHE_DIR": str(tmp_path / "cache"),
        "CCACHE_CONFIGPATH": str(tmp_path / "ccache.conf"),
        **dict(CCACHE_KEYING),
    }
    subprocess.run(
        [CCACHE, NVCC, "-MD", "-MF", "k.o.d", "-c", "k.cu", "-o", "k.o",
         "-gencode", "arch=compute_90,code=sm_90"],
        cwd=tmp_path, env=env, check=True, timeout=300,
    )  # fmt: skip
    assert _stats(env)["preprocessed_cache_miss"] == 1


def _versioned_gxx() -> str | None:
    """A g++ this machine has under a versioned name (`g++-12` on Debian 12), or None."""
    return next((f"g++-{n}" for n in range(20, 8, -1) if shutil.which(f"g++-{n}")), None)


def test_a_cxx_named_by_version_compiles_through_the_cache(tmp_path: Path) -> None:
    """CXX=g++-12 (a compiler version a CUDA toolkit accepts, say): torch calls `$CXX` as
    given, so the masquerade directory must have that name too, or no unit is cached."""
    from fixtures.cli import HOST_CELL, REPO, buildtools

    gxx = _versioned_gxx()
    if gxx is None:
        pytest.skip("no g++ under a versioned name (g++-N) on PATH")
    project = tmp_path / "ext"
    shutil.copytree(
        REPO / "examples" / "scatter", project, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    ccache_dir = tmp_path / "ccache"
    env = {**os.environ, "CXX": gxx, "BUILDTOOLS_CCACHE_DIR": str(ccache_dir)}
    proc = buildtools(
        *("build", "--project", str(project), "--wheelhouse", str(tmp_path / "wh"), "--no-live"),
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = _stats({**os.environ, "CCACHE_DIR": str(ccache_dir / HOST_CELL)})
    assert stats["cache_miss"] >= 1, stats  # scatter.cpp went through ccache
    assert (ccache_dir / "bin" / gxx).readlink().name == "ccache"
