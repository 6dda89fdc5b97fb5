"""Job fingerprints: every input that can change the wheel changes the fingerprint; inputs
that only say where or how fast a job runs do not. Fingerprinting a project reads regular
files only and names the rest (a FIFO used to hang `buildtools build` forever; a dangling
link gave a traceback)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fixtures.factories import make_job

from buildtools.model import BuildJob, Toolkit
from buildtools.wheelbuild.fingerprint import (
    build_vars,
    fingerprint_inputs,
    job_fingerprint,
    scan_sources,
    source_fingerprint,
)

TOOLCHAIN = {"python": "3.12.1", "torch_requirement": "torch==2.11.0", "accelerator": "cu130"}


def cuda_job(**changes: Any) -> BuildJob:
    """The job every fingerprint here starts from (torch 2.11.0, CUDA 13.0), with `changes`."""
    return make_job(**{"accelerator": "cu130", "torch": "2.11.0", **changes})


def fp(
    job: BuildJob | None = None,
    *,
    sources: str = "sha256:src",
    toolchain: Mapping[str, Any] = TOOLCHAIN,
    backend: Mapping[str, str] | None = None,
    host_env: Mapping[str, str] | None = None,
) -> str:
    return job_fingerprint(
        fingerprint_inputs(
            job or cuda_job(),
            sources=sources,
            toolchain=toolchain,
            backend=backend or {"backend": "local"},
            host_env=host_env or {},
        )
    )


def test_same_inputs_same_fingerprint() -> None:
    assert fp() == fp()
    assert fp().startswith("sha256:")


INPUTS_OF_THE_WHEEL = [
    ("a source file", {"sources": "sha256:other"}),
    (
        "a build_env value",
        {"job": cuda_job(env=(*cuda_job().env, ("X", "1")))},
    ),
    (
        "the arch list",
        {"job": cuda_job(toolkit=Toolkit(kind="cuda", version="13.0", arch_list="9.0"))},
    ),
    (
        "the torch version",
        {
            "job": cuda_job(torch="2.11.1", torch_requirement="torch==2.11.1"),
            "toolchain": {**TOOLCHAIN, "torch_requirement": "torch==2.11.1"},
        },
    ),
    ("the Python full version", {"toolchain": {**TOOLCHAIN, "python": "3.12.2"}}),
    ("the toolkit pins", {"toolchain": {**TOOLCHAIN, "toolkit": ["cuda-toolkit==13.0.2"]}}),
    ("the local version label", {"job": cuda_job(local_version="pt211cu130x")}),
    ("the repair excludes", {"job": cuda_job(repair_excludes=("libfoo.so*",))}),
    ("the backend", {"backend": {"backend": "docker", "image": "b:1"}}),
    ("the host's CXX", {"host_env": {"CXX": "clang++"}}),
    ("the host's TORCH_CUDA_ARCH_LIST", {"host_env": {"TORCH_CUDA_ARCH_LIST": "9.0"}}),
    ("the host's FORCE_ONLY_CPU", {"host_env": {"FORCE_ONLY_CPU": "1"}}),
]


@pytest.mark.parametrize(
    ("what", "changed"), INPUTS_OF_THE_WHEEL, ids=[w for w, _ in INPUTS_OF_THE_WHEEL]
)
def test_every_input_of_the_wheel_changes_the_fingerprint(
    what: str, changed: dict[str, Any]
) -> None:
    assert fp(**changed) != fp(), what


ONLY_WHERE_OR_HOW_FAST = [
    ("the build runner label", {"job": cuda_job(runner="big-runner")}),
    ("the smoke runner", {"job": cuda_job(smoke_runner=("self-hosted", "gpu"))}),
    (
        "MAX_JOBS of the job",
        {"job": cuda_job(env=(*cuda_job().env, ("MAX_JOBS", "7")))},
    ),
    ("no compiler cache", {"job": cuda_job(compiler_cache=None)}),
    ("sccache, not ccache", {"job": cuda_job(compiler_cache="sccache")}),
    (
        "unrelated host variables",
        {"host_env": {"TERM": "xterm", "MAX_JOBS": "3", "HOME": "/x"}},
    ),
]


@pytest.mark.parametrize(
    ("what", "changed"), ONLY_WHERE_OR_HOW_FAST, ids=[w for w, _ in ONLY_WHERE_OR_HOW_FAST]
)
def test_where_and_how_fast_do_not_change_the_fingerprint(
    what: str, changed: dict[str, Any]
) -> None:
    assert fp(**changed) == fp(), what


def test_build_vars_keep_compiler_and_torch_variables_only() -> None:
    env = {"CC": "gcc", "CFLAGS": "-O2", "PYTORCH_ROCM_ARCH": "gfx90a", "PATH": "/bin", "PWD": "/x"}
    assert build_vars(env) == {"CC": "gcc", "CFLAGS": "-O2", "PYTORCH_ROCM_ARCH": "gfx90a"}


def test_source_fingerprint_follows_content_not_mtime(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    cpp = tmp_path / "csrc" / "a.cpp"
    cpp.write_text("int a;\n")
    (tmp_path / "build").mkdir()  # build outputs are not sources
    (tmp_path / "build" / "a.o").write_bytes(b"\0")
    first = source_fingerprint(tmp_path)
    cpp.touch()
    (tmp_path / "build" / "a.o").write_bytes(b"\1")
    assert source_fingerprint(tmp_path) == first
    cpp.write_text("int a = 1;\n")
    assert source_fingerprint(tmp_path) != first


# ------------------------------------------------------------------ the project's files


@pytest.fixture
def deadline() -> Iterator[None]:
    """A hang becomes a failure after 10 s instead of blocking the suite."""

    def fail(signum: int, frame: object) -> None:
        raise TimeoutError("fingerprinting hung")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "setup.py").write_text("print('hi')\n")
    (root / "src" / "a.cpp").write_text("int a;\n")
    return root


def test_fifo_is_skipped_not_read(tmp_path: Path, deadline: None) -> None:
    root = _project(tmp_path)
    before = source_fingerprint(root)
    os.mkfifo(root / "src" / "pipe")
    scan = scan_sources(root)
    assert ("src/pipe", "a FIFO") in scan.skipped
    assert source_fingerprint(root) == before


def test_dangling_symlink_is_skipped(tmp_path: Path, deadline: None) -> None:
    root = _project(tmp_path)
    (root / "gone.h").symlink_to(root / "missing.h")
    assert ("gone.h", "a dangling symbolic link") in scan_sources(root).skipped
    source_fingerprint(root)  # no traceback


def test_symlinks_are_followed_only_inside_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (tmp_path / "secret").write_text("outside\n")
    (root / "out.h").symlink_to(tmp_path / "secret")
    (root / "in.h").symlink_to(root / "setup.py")
    scan = scan_sources(root)
    assert ("out.h", "a symbolic link out of the project") in scan.skipped
    assert root / "in.h" in scan.files


def test_what_buildtools_writes_is_not_a_source(tmp_path: Path) -> None:
    """smoke, index and ci write into a project whose path is `.`: a following build must
    find the same sources (its wheel unchanged), while any file a compile may read counts."""
    from buildtools.wheelbuild.fingerprint import source_files

    root = tmp_path / "ext"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "op.cpp").write_text("int f();\n")
    (root / "setup.py").write_text("from setuptools import setup\n")
    before = source_fingerprint(root)
    outputs = {
        "smoke-results/report.json": '{"schema": "torch-buildtools/smoke-report/v1"}',
        "site/index.json": "{}",
        "wheelhouse/report.json": "{}",
        ".github/workflows/release.yml": "on: push\n",
        "preview/index.json": '{\n "schema": "torch-buildtools/index/v1"}',  # --site preview
        "out/smoke/report.json": '{"schema": "torch-buildtools/smoke-report/v1"}',
        "out/smoke/junit.xml": "<testsuites/>",
        "matrix.yaml": "version: 1\n",
        "noxfile.py": "import nox\n",
        "build/torch-buildtools/j/op.o": "obj",
        ".site.lock": "",  # what index keeps beside its site
        ".site.prev/index.json": "{}",
        ".preview.staging-x1/torch.html": "",
        ".smoke-results.lock": "",
    }
    for rel, text in outputs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert source_fingerprint(root) == before
    # the same names deeper down, or a report.json of someone else, are sources
    for rel in ("config/matrix.yaml", "data/report.json", "tools/noxfile.py", ".clang-format"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text('{"schema": "theirs"}')
    assert sorted(p.relative_to(root).as_posix() for p in source_files(root)) == [
        ".clang-format",
        "config/matrix.yaml",
        "csrc/op.cpp",
        "data/report.json",
        "setup.py",
        "tools/noxfile.py",
    ]


def test_a_cpu_cell_ignores_the_cuda_variables_its_build_never_sees() -> None:
    cpu = make_job(accelerator="cpu", torch="2.13.0")
    cuda_home = {"CUDA_HOME": "/usr/local/cuda-13.0", "CUDA_PATH": "/opt/cuda"}
    assert fp(cpu, host_env=cuda_home) == fp(cpu, host_env={"TERM": "x"})
    # a CUDA cell compiles with it, and a CPU cell with everything else
    assert fp(host_env=cuda_home) != fp(host_env={"TERM": "x"})
    assert fp(cpu, host_env={"CXXFLAGS": "-O3"}) != fp(cpu, host_env={"TERM": "x"})
