"""The nvcc wrapper with the real nvcc (no GPU needed): a device unit compiled for one Python's
cell is reused by another's, to the same bytes as compiling it there; a unit that includes a
Python header, or whose header changed, is compiled again; `enforce` replaces the project's
arch flags.

Two "cells" are two site-packages holding the same torch-like header and two Python include
directories whose headers differ, as two Pythons' environments of one torch have.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from buildtools.toolchain import devicewrap, headerview
from buildtools.toolchain.archopts import cuda_arch_flags
from buildtools.toolchain.findpython import find_python
from buildtools.wheel.devicecode import parse_fatbin

pytestmark = pytest.mark.integration

_WHICH = shutil.which("nvcc")
NVCC = None
if _WHICH is not None:
    # the real driver (a PATH entry may be a shell script in front of it): its directory holds
    # the programs the unit key hashes
    found = subprocess.run(
        [_WHICH, "--dryrun", "--version"], check=False, capture_output=True, text=True, timeout=60
    )
    top = next((ln.split("=", 1)[1] for ln in found.stderr.splitlines() if "TOP=" in ln), None)
    NVCC = (
        str(Path(top) / "bin" / "nvcc")
        if top and (Path(top) / "bin" / "nvcc").is_file()
        else _WHICH
    )
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc on PATH (no GPU needed)")

HEADER = "#pragma once\n__device__ inline int twice(int x) { return 2 * x; }\n"
UNIT = "#include <torch/twice.h>\n__global__ void k(int* x) { x[0] = twice(x[0]); }\nvoid launch(int* x) { k<<<1, 1>>>(x); }\n"
PY_UNIT = "#include <Python.h>\n__global__ void k(int* x) { x[0] = PY_FLAVOUR; }\nvoid launch(int* x) { k<<<1, 1>>>(x); }\n"


def _cell(root: Path, name: str, flavour: int) -> dict[str, Path]:
    sp = root / name / "site-packages"
    (sp / "torch").mkdir(parents=True)
    (sp / "torch" / "twice.h").write_text(HEADER)
    py = root / name / "include" / f"python3.{flavour}"
    py.mkdir(parents=True)
    (py / "Python.h").write_text(f"#pragma once\n#define PY_FLAVOUR {flavour}\n")
    return {"sp": sp, "py": py, "obj": root / name / "obj", "keep": root / name / "keep"}


def _compile(
    project: Path,
    cell: dict[str, Path],
    source: str,
    *,
    job: str,
    store: Path | None,
    arch: list[str],
    enforce: list[str] | None = None,
    include: Path | None = None,
    flags: tuple[str, ...] = (),
) -> tuple[bytes, list[dict[str, object]]]:
    """One unit through the wrapper as torch's ninja build runs it; (object, log lines)."""
    assert NVCC is not None
    cell["obj"].mkdir(exist_ok=True)
    cell["keep"].mkdir(exist_ok=True)
    log = cell["obj"] / f"{job}.jsonl"
    config = devicewrap.WrapConfig(
        downstream=(NVCC,),
        compiler=NVCC,
        arch_flags=tuple(enforce) if enforce is not None else None,
        store=str(store) if store else None,
        job=job,
        site_packages=str(cell["sp"]),
        python_include=(str(cell["py"]),),
        project=str(project),
        log=str(log),
    )
    path = cell["obj"] / f"{job}.json"
    path.write_text(json.dumps(config.to_json()))
    obj = cell["obj"] / "unit.o"
    obj.unlink(missing_ok=True)
    sp = cell["sp"]
    argv = [
        sys.executable, "-I", devicewrap.__file__, str(path),
        "--generate-dependencies-with-compile", "--dependency-output", f"{obj}.d",
        f"-I{include or sp}", f"-I{cell['py']}", "-c", str(project / source), "-o", str(obj),
        *arch, f"-Xcompiler=-ffile-prefix-map={sp}=/site-packages",
        "-frandom-seed=x", "--keep", "--keep-dir", str(cell["keep"]), *flags,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_")}
    subprocess.run(argv, check=True, env=env, timeout=600)
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return obj.read_bytes(), lines


def _archs(data: bytes, tmp: Path) -> frozenset[str]:
    path = tmp / "probe.o"
    path.write_bytes(data)
    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin")
        assert section is not None
        return parse_fatbin(section.data())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "unit.cu").write_text(UNIT)
    (root / "pyunit.cu").write_text(PY_UNIT)
    return root


SM90 = ["-gencode", "arch=compute_90,code=sm_90"]


@needs_nvcc
def test_a_unit_is_compiled_once_for_every_python_to_the_same_bytes(
    tmp_path: Path, project: Path
) -> None:
    store = tmp_path / "store"
    one, two = _cell(tmp_path, "cp311", 11), _cell(tmp_path, "cp312", 12)
    first, log1 = _compile(project, one, "unit.cu", job="cp311", store=store, arch=SM90)
    assert log1[-1]["reuse"] == "stored"
    reused, log2 = _compile(project, two, "unit.cu", job="cp312", store=store, arch=SM90)
    assert log2[-1]["reuse"] == "reused"
    assert log2[-1]["source_job"] == "cp311"
    alone, _ = _compile(project, two, "unit.cu", job="alone", store=None, arch=SM90)
    assert reused == first == alone  # the same bytes as compiling it in that cell
    depfile = (two["obj"] / "unit.o.d").read_text()
    assert str(two["sp"] / "torch" / "twice.h") in depfile  # ninja's deps name this cell's


@needs_nvcc
def test_a_unit_that_includes_python_or_a_changed_header_is_compiled_again(
    tmp_path: Path, project: Path
) -> None:
    store = tmp_path / "store"
    one, two = _cell(tmp_path, "cp311", 11), _cell(tmp_path, "cp312", 12)
    _, log = _compile(project, one, "pyunit.cu", job="cp311", store=store, arch=SM90)
    assert log[-1]["reuse"] == "python-dependent"
    _, log = _compile(project, two, "pyunit.cu", job="cp312", store=store, arch=SM90)
    assert log[-1]["reuse"] == "python-dependent"
    _compile(project, one, "unit.cu", job="cp311", store=store, arch=SM90)
    (two["sp"] / "torch" / "twice.h").write_text(HEADER.replace("2 * x", "3 * x"))
    _, log = _compile(project, two, "unit.cu", job="cp312", store=store, arch=SM90)
    assert log[-1]["reuse"] == "stored"  # compiled, not reused: its header differs


@needs_nvcc
def test_enforce_replaces_the_projects_arch_flags(tmp_path: Path, project: Path) -> None:
    one = _cell(tmp_path, "cp311", 11)
    own = ["-gencode", "arch=compute_80,code=sm_80", "-gencode=arch=compute_86,code=sm_86"]
    data, _ = _compile(project, one, "unit.cu", job="keep", store=None, arch=own)
    assert _archs(data, tmp_path) == {"sm_80", "sm_86"}
    flags = cuda_arch_flags("9.0+PTX")
    data, log = _compile(
        project, one, "unit.cu", job="enforce", store=None, arch=own, enforce=flags
    )
    assert _archs(data, tmp_path) == {"sm_90", "compute_90"}
    assert log[-1]["replaced"] == [
        "-gencode arch=compute_80,code=sm_80",
        "-gencode=arch=compute_86,code=sm_86",
    ]


@needs_nvcc
def test_a_cell_whose_environment_is_reached_through_a_link_reuses_too(
    tmp_path: Path, project: Path
) -> None:
    """A linked cache directory: the compiler sees the linked spelling of site-packages."""
    store = tmp_path / "store"
    one = _cell(tmp_path, "cp311", 11)
    real = _cell(tmp_path / "real", "cp312", 12)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    two = {
        k: Path(str(v).replace(str(tmp_path / "real"), str(tmp_path / "linked")))
        for k, v in real.items()
    }
    first, _ = _compile(project, one, "unit.cu", job="cp311", store=store, arch=SM90)
    reused, log = _compile(project, two, "unit.cu", job="cp312", store=store, arch=SM90)
    assert log[-1]["reuse"] == "reused"
    alone, _ = _compile(project, two, "unit.cu", job="alone", store=None, arch=SM90)
    assert reused == first == alone


FILE_HEADER = "inline const char* twice_file() { return __FILE__; }\n"
FILE_UNIT = UNIT + "const char* where() { return twice_file(); }\n"


def _pythons() -> list[str]:
    """Two interpreters of other minor versions than this one's (pyenv, uv or PATH)."""
    found = []
    for minor in range(10, 15):
        if minor != sys.version_info[1]:
            with contextlib.suppress(Exception):
                found.append(str(find_python(f"3.{minor}", env=dict(os.environ), home=Path.home())))
    return found[:2]


needs_two_pythons = pytest.mark.skipif(
    len(_pythons()) < 2, reason="needs two Pythons 3.10+ on PATH besides this one"
)


def _python_cell(root: Path, python: str) -> dict[str, Path]:
    """A container's cell: a real interpreter (a venv of `python`) whose site-packages holds
    the torch-like header; the wrapper is told only the interpreter."""
    venv = root / f"venv-{Path(python).parent.parent.name}"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    code = "import sysconfig as s; print(s.get_paths()['purelib']); print(s.get_paths()['include'])"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", code],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.split("\n")  # fmt: skip
    sp = Path(out[0])
    (sp / "torch").mkdir(parents=True)
    # __FILE__ in a header, as torch's TORCH_CHECK has: the path reaches the object unless mapped
    (sp / "torch" / "twice.h").write_text(HEADER + FILE_HEADER)
    return {"python": venv / "bin" / "python", "sp": sp, "py": Path(out[1]), "obj": venv / "obj"}


def _cell_compile(
    project: Path, cell: dict[str, Path], source: str, *, job: str, store: Path | None
) -> tuple[bytes, dict[str, object]]:
    """The wrapper as a container's build runs it: under another Python (this one), the
    cell's `python` named in the config, no site-packages map in the arguments."""
    assert NVCC is not None
    cell["obj"].mkdir(exist_ok=True)
    log = cell["obj"] / f"{job}.jsonl"
    config = devicewrap.WrapConfig(
        downstream=(NVCC,), compiler=NVCC, store=str(store) if store else None, job=job,
        project=str(project), log=str(log), python=str(cell["python"]),
    )  # fmt: skip
    path = cell["obj"] / f"{job}.json"
    path.write_text(json.dumps(config.to_json()))
    obj = cell["obj"] / "unit.o"
    obj.unlink(missing_ok=True)
    argv = [
        sys.executable, "-I", devicewrap.__file__, str(path),
        "--generate-dependencies-with-compile", "--dependency-output", f"{obj}.d",
        f"-I{cell['sp']}", f"-I{cell['py']}", "-c", str(project / source), "-o", str(obj),
        *SM90, "-frandom-seed=x", "--keep", "--keep-dir", str(cell["obj"]),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_")}
    subprocess.run(argv, check=True, env=env, timeout=600)
    return obj.read_bytes(), json.loads(log.read_text().splitlines()[-1])


@needs_nvcc
@needs_two_pythons
def test_a_containers_cells_name_only_their_python_and_reuse_across_versions(
    tmp_path: Path, project: Path
) -> None:
    """Two Python versions' site-packages (lib/python3.X: different paths): the wrapper asks
    each cell's interpreter, maps its site-packages out, and the second cell reuses the first's
    object, byte-identical to compiling it there; a Python header is still found per cell."""
    store = tmp_path / "store"
    (project / "unit.cu").write_text(FILE_UNIT)
    one, two = (_python_cell(tmp_path, p) for p in _pythons())
    assert one["sp"].parent.name != two["sp"].parent.name  # python3.X differs
    first, rec1 = _cell_compile(project, one, "unit.cu", job="one", store=store)
    assert rec1["reuse"] == "stored"
    reused, rec2 = _cell_compile(project, two, "unit.cu", job="two", store=store)
    assert (rec2["reuse"], rec2["source_job"]) == ("reused", "one")
    alone, _ = _cell_compile(project, two, "unit.cu", job="alone", store=None)
    assert reused == first == alone
    assert b"/site-packages/torch/twice.h" in alone  # the header's __FILE__, mapped
    assert str(two["sp"]).encode() not in alone
    (project / "pyunit2.cu").write_text(PY_UNIT.replace("PY_FLAVOUR", "PY_MAJOR_VERSION"))
    _, rec = _cell_compile(project, two, "pyunit2.cu", job="py", store=store)
    assert rec["reuse"] == "python-dependent"


def test_a_cell_python_that_answers_no_paths_stops_the_compile_with_one_line(
    tmp_path: Path,
) -> None:
    """The cell's interpreter runs the project's environment: an answer that is not three
    paths is refused (exit 2, one line), not unpacked into the key."""
    liar = tmp_path / "python"
    liar.write_text('#!/bin/sh\necho \'{"purelib": "/"}\'\n')
    liar.chmod(0o755)
    config = devicewrap.WrapConfig(downstream=("true",), job="j", python=str(liar))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_json()))
    done = subprocess.run(
        [sys.executable, "-I", devicewrap.__file__, str(path), "-c", "x.cu", "-o", "x.o"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not three paths" in lines[0] and str(liar) in lines[0], done.stderr


VIEW_UNIT = (
    '#include <torch/twice.h>\n#include "local.h"\n'
    "__global__ void k(int* x) { x[0] = twice(x[0]) + LOCAL; }\n"
    "void launch(int* x) { k<<<1, 1>>>(x); }\n"
)


def _torch_cell(root: Path, name: str, flavour: int, mtime: int) -> dict[str, Path]:
    """A cell whose torch headers sit in `<site-packages>/torch/include`, as torch's do, dated
    `mtime` (each Python's environment was installed at another time)."""
    cell = _cell(root, name, flavour)
    include = cell["sp"] / "torch" / "include" / "torch"
    include.mkdir(parents=True)
    (include / "twice.h").write_text(HEADER)
    os.utime(include / "twice.h", (mtime, mtime))
    return {**cell, "include": cell["sp"] / "torch" / "include"}


@needs_nvcc
def test_a_unit_with_line_info_is_compiled_once_against_header_views(
    tmp_path: Path, project: Path
) -> None:
    """Line info keeps the path and mtime of every header in the device code: two cells' own
    compiles differ, through header views they are one object, and a cell built alone with
    an empty store at the same path (the views' path is in the object, as the environment's
    was) makes the same bytes; a project header touched is compiled again."""
    (project / "view.cu").write_text(VIEW_UNIT)
    (project / "local.h").write_text("#define LOCAL 1\n")
    one = _torch_cell(tmp_path, "cp311", 11, 1_700_000_000)
    two = _torch_cell(tmp_path, "cp312", 12, 1_750_000_000)
    line = ("-lineinfo",)

    def build(cell: dict[str, Path], job: str, store: Path | None) -> tuple[bytes, dict]:
        data, log = _compile(
            project, cell, "view.cu", job=job, store=store, arch=SM90,
            include=cell["include"], flags=line,
        )  # fmt: skip
        return data, log[-1] if log else {}

    own_one, _ = build(one, "own311", None)
    own_two, _ = build(two, "own312", None)
    assert own_one != own_two  # the premise: line info carries each cell's paths and mtimes
    store = tmp_path / "store"
    first, log1 = build(one, "cp311", store)
    assert log1["reuse"] == "stored" and log1["header_views"] == 1, log1
    reused, log2 = build(two, "cp312", store)
    assert log2["reuse"] == "reused" and log2["source_job"] == "cp311", log2
    views = list((store / "views").glob("[0-9a-f]*/include/torch/twice.h"))
    assert len(views) == 1 and views[0].stat().st_mtime == 315532800
    shutil.rmtree(store)
    alone, log3 = build(two, "alone", store)
    assert log3["reuse"] == "stored"
    assert reused == first == alone
    os.utime(project / "local.h", (1_760_000_000, 1_760_000_000))  # same bytes, another date
    _, log4 = build(two, "touched", store)
    assert log4["reuse"] == "stored"  # its mtime is in the object: compiled again


def test_the_compilers_own_include_directories_in_site_packages_get_views(
    tmp_path: Path,
) -> None:
    """A CUDA toolkit from PyPI (torch's nvidia-* wheels) sits in each environment's
    site-packages; nvcc adds its include directories itself (nvcc.profile, as `--dryrun`
    prints them): they are named through views after the project's, in nvcc's order."""
    site = tmp_path / "site-packages"
    inc = site / "nvidia" / "cu13" / "include"
    (inc / "cccl" / "cub").mkdir(parents=True)
    (inc / "cuda_runtime.h").write_text("\n")
    (inc / "cccl" / "cub" / "cub.cuh").write_text("\n")
    nvcc = site / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(
        "#!/bin/sh\n"
        f"echo '#$ INCLUDES=\"-I{nvcc.parent}/..//include\"  ' >&2\n"
        f'echo \'#$ SYSTEM_INCLUDES="-isystem" "{nvcc.parent}/..//include/cccl"  \' >&2\n'
        "echo '#$ LIBRARIES=  \"-L/usr/lib\"' >&2\n"
    )
    nvcc.chmod(0o755)
    assert headerview.compiler_includes(str(nvcc), {}) == [
        "-I", str(inc), "-isystem", str(inc / "cccl"),
    ]  # fmt: skip
    args = ["-c", "k.cu", "-I/usr/include/x"]
    done = headerview.apply(tmp_path / "store", str(site), args, {}, (), str(nvcc))
    assert not isinstance(done, str)
    out, _, count = done
    assert count == 2 and out[:3] == args
    assert out[3] == "-I" and Path(out[4], "cuda_runtime.h").is_file()
    assert out[5] == "-isystem" and Path(out[6], "cub", "cub.cuh").is_file()
    assert str(tmp_path / "store" / "views") in out[4]
