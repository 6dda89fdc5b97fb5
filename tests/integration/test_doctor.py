"""`buildtools doctor` and `torch: current` for real: build against one torch, install beside another.

Torches: the cached torch 2.13.0+cpu test env (Python 3.11; tests/fixtures/envs.py creates it
on first use) and, where the cache already has one, a torch 2.11.0 toolchain env (Python
3.12, left by `buildtools build` of a torch2.11.0 cell; never downloaded here: the tests that
need it skip with that reason). Every environment under test is a fresh venv that imports one
of those torches through a `.pth` file, so the cached envs are never modified, and every
verdict is checked against what `import` really does there.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from fixtures.cli import REPO, buildtools
from fixtures.envs import TorchEnv, build_fixture_wheel, cache_dir, grafted_wheel
from fixtures.factories import built_record, make_job

from buildtools.context import RunContext
from buildtools.process import CommandResult, SubprocessRunner
from buildtools.wheel.meta import read_build_record, relabel_wheel
from buildtools.wheel.repair import best_platform_tag

RUNNER = SubprocessRunner()
INDEX = "https://example.test/whl"
DRIFTED = "_ZN3c1013getDtypeNamesB5cxx11ENS_10ScalarTypeE"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ELF wheels need Linux")


@pytest.fixture(scope="module")
def env211() -> TorchEnv:
    """A cached torch 2.11.0 environment (any accelerator), or skip."""
    for base in (cache_dir() / "toolchains", cache_dir() / "envs" / "toolchains"):
        for root in sorted(base.glob("py3.12*-torch2.11.0-*")) if base.is_dir() else ():
            site = root / "lib" / "python3.12" / "site-packages"
            if (
                "current" not in root.name
                and (root / "buildtools-toolchain.json").is_file()
                and (site / "torch" / "lib" / "libc10.so").is_file()
                and (site / "build").is_dir()
            ):
                return TorchEnv(root=root, torch_version="2.11.0", python_version="3.12")
    pytest.skip(
        "no cached torch 2.11.0 / Python 3.12 environment (it is ~5 GB; `buildtools build "
        "--profile release --only torch2.11.0-cu130-cp312` leaves one in the cache)"
    )


def relabel(wheel: Path, out: Path, *, torch: str, accelerator: str, label: str) -> Path:
    """The wheel as `buildtools build` would label it for that torch."""
    job = make_job(torch=torch.split("+", maxsplit=1)[0], accelerator=accelerator)
    record = built_record(job, torch=torch)
    minor = ".".join(torch.split(".")[:2])
    return relabel_wheel(
        wheel,
        out_dir=out,
        local_version=label,
        requires_dist_torch=f"torch=={minor}.*",
        build_record=record,
    )


def venv_beside(torch_site: Path, base_python: Path, where: Path, *wheels: Path) -> Path:
    """A fresh venv that imports the torch in `torch_site` (via .pth), with `wheels` installed."""
    base = base_python.resolve()
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True)
    pyver = f"python{'.'.join(base.name.removeprefix('python').split('.')[:2])}"
    site = where / "lib" / pyver / "site-packages"
    (site / "beside-torch.pth").write_text(f"import site; site.addsitedir({str(torch_site)!r})\n")
    python = where / "bin" / "python"
    if wheels:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
            + [str(w) for w in wheels],
            check=True,
            timeout=600,
        )
    return python


def doctor(python: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    proc = doctor_text(python, "--json", *args, cwd=cwd)
    assert proc.stdout.startswith("{"), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def doctor_text(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return buildtools(
        *("doctor", "--python", str(python), *args),
        cwd=cwd,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def run_python(python: Path, code: str) -> CommandResult:
    return RUNNER.run([str(python), "-c", code], capture=True, timeout=300)


def package(report: dict[str, Any], name: str) -> dict[str, Any]:
    (pkg,) = [p for p in report["packages"] if p["name"] == name]
    return pkg


@pytest.fixture(scope="module")
def ext_ok_213(
    fixture_wheel: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    raw = fixture_wheel("ext_ok")
    return relabel(
        raw, tmp_path_factory.mktemp("ok"), torch="2.13.0+cpu", accelerator="cpu", label="pt213cpu"
    )


@pytest.fixture(scope="module")
def ext_drift_211(
    env211: TorchEnv, integration_log: IO[str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """ext_drift built against torch 2.11 (abi3), labelled as a build of that cell would be."""
    raw = build_fixture_wheel("ext_drift", env211, RUNNER, log=integration_log)
    assert raw.name == "ext_drift-0.1.0-cp39-abi3-linux_x86_64.whl"
    torch = json.loads(
        run_python(env211.python, "import json, torch; print(json.dumps(torch.__version__))")
        .output.strip()
        .splitlines()[-1]
    )
    accel = "cpu" if torch.endswith("+cpu") else torch.rsplit("+", 1)[-1]
    return relabel(
        raw,
        tmp_path_factory.mktemp("drift"),
        torch=torch,
        accelerator=accel,
        label=f"pt211{accel}",
    )


# --- a healthy environment ----------------------------------------------------------------


def test_healthy_environment_reports_healthy(
    torch213: TorchEnv, ext_ok_213: Path, tmp_path: Path
) -> None:
    rc, bare = doctor(torch213.python, cwd=tmp_path)
    assert rc == 0, bare
    assert bare["torch"]["version"] == "2.13.0+cpu"
    assert bare["torch"]["build"] == "release" and bare["torch"]["cxx11_abi"] is True
    assert bare["torch"]["imported"] is True and bare["torch"]["gpus"] == []
    assert bare["packages"] == []

    python = venv_beside(torch213.site_packages, torch213.python, tmp_path / "venv", ext_ok_213)
    rc, report = doctor(python, cwd=tmp_path)
    assert rc == 0, report
    pkg = package(report, "ext_ok")
    assert pkg["verdict"] == "healthy", pkg
    assert pkg["built_for"] == {
        "torch": "2.13.0+cpu",
        "accelerator": "cpu",
        "source": "build-record",
        "abi": "per-python",
        "label": "pt213cpu",
    }
    assert pkg["fix"] is None and pkg["findings"] == []
    assert report["summary"] == {"healthy": 1, "broken": 0, "unknown": 0}
    proof = run_python(python, "import torch, ext_ok; print(ext_ok.add_one(torch.zeros(2)))")
    assert proof.ok and "tensor([1., 1.])" in proof.output, proof.output
    text = doctor_text(python, cwd=tmp_path)
    assert text.returncode == 0
    assert (
        "ext_ok 0.1.0+pt213cpu: healthy: built for torch 2.13.0+cpu (build record)" in text.stdout
    )


# --- built against torch 2.11, installed beside 2.13 --------------------------------------


def test_built_for_211_beside_213_is_broken_with_the_index_wheel_as_fix(
    torch213: TorchEnv, ext_drift_211: Path, tmp_path: Path
) -> None:
    python = venv_beside(torch213.site_packages, torch213.python, tmp_path / "venv", ext_drift_211)
    rc, report = doctor(python, "--index", INDEX, cwd=tmp_path)
    assert rc == 13, report
    pkg = package(report, "ext_drift")
    assert pkg["verdict"] == "broken"
    assert pkg["built_for"]["source"] == "build-record"
    assert pkg["built_for"]["torch"].startswith("2.11.0")
    undefined = [f for f in pkg["findings"] if f["code"] == "undefined-symbol"]
    assert any(
        "c10::getDtypeNames[abi:cxx11](c10::ScalarType)" in f["message"]
        and f"mangled: {DRIFTED}" in f["details"]
        for f in undefined
    ), undefined
    assert "torch-mismatch" in {f["code"] for f in pkg["findings"]}
    assert pkg["fix"]["commands"] == [
        f"{python} -m pip install 'ext_drift==0.1.0+pt213cpu' -f {INDEX}/torch-2.13.0+cpu.html"
    ]
    # what doctor predicted is what import does
    proof = run_python(python, "import torch, ext_drift")
    assert not proof.ok
    assert f"undefined symbol: {DRIFTED}" in proof.output


def test_built_for_211_beside_211_is_healthy(
    env211: TorchEnv, ext_drift_211: Path, tmp_path: Path
) -> None:
    python = venv_beside(env211.site_packages, env211.python, tmp_path / "venv", ext_drift_211)
    rc, report = doctor(python, cwd=tmp_path)
    assert rc == 0, report
    pkg = package(report, "ext_drift")
    assert pkg["verdict"] == "healthy", pkg
    proof = run_python(
        python, "import torch, ext_drift; print(ext_drift.dtype_name(torch.ones(1)))"
    )
    assert proof.ok and proof.output.strip().splitlines()[-1] == "float32", proof.output


# --- broken beside their own torch ---------------------------------------------------------


def test_undefined_symbol_and_grafted_torch(
    torch213: TorchEnv,
    fixture_wheel: Callable[[str], Path],
    integration_log: IO[str],
    tmp_path: Path,
) -> None:
    undefined = fixture_wheel("ext_undefined")
    raw_ok = fixture_wheel("ext_ok")
    best = best_platform_tag(raw_ok, ctx=RunContext.of(processes=RUNNER, log=integration_log)).best
    grafted = grafted_wheel(raw_ok, torch213, RUNNER, plat=best, log=integration_log)
    with zipfile.ZipFile(grafted) as zf:
        assert [n for n in zf.namelist() if n.startswith("ext_ok.libs/libc10")]

    python = venv_beside(torch213.site_packages, torch213.python, tmp_path / "a", undefined)
    rc, report = doctor(python, "--index", INDEX, cwd=tmp_path)
    assert rc == 13
    pkg = package(report, "ext_undefined")
    assert pkg["verdict"] == "broken" and pkg["ours"] is False
    assert pkg["built_for"]["source"] == "unknown"
    assert any("c10::definitely_not_in_torch(int)" in f["message"] for f in pkg["findings"])
    # not our package: no index of ours has it, so rebuild it from its sdist
    assert pkg["fix"]["commands"] == [
        f"{python} -m pip install --force-reinstall --no-deps --no-build-isolation "
        "--no-binary ext_undefined 'ext_undefined==0.1.0'"
    ]
    proof = run_python(python, "import torch, ext_undefined")
    assert "undefined symbol: _ZN3c1023definitely_not_in_torchEi" in proof.output

    python = venv_beside(torch213.site_packages, torch213.python, tmp_path / "b", grafted)
    rc, report = doctor(python, cwd=tmp_path)
    assert rc == 13
    pkg = package(report, "ext_ok")
    bundled = [f for f in pkg["findings"] if f["code"] == "bundled-torch-lib"]
    assert bundled and any("libc10" in f["message"] for f in bundled)
    assert pkg["verdict"] == "broken"
    # named as this project's package in matrix.yaml: the index wheel is the fix
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {REPO / "tests" / "fixtures" / "ext_ok"}, name: ext_ok}}
        axes: {{torch: ["2.13.0"], accelerator: [cpu], python: ["3.11"]}}
        index: {{base_url: "{INDEX}"}}
        """)
    )
    rc, report = doctor(python, "--matrix", str(matrix), cwd=tmp_path)
    pkg = package(report, "ext_ok")
    assert pkg["ours"] is True
    assert pkg["fix"]["commands"] == [
        f"{python} -m pip install 'ext_ok==0.1.0+pt213cpu' -f {INDEX}/torch-2.13.0+cpu.html"
    ]


# --- a source-built torch, and building against it with torch: current ---------------------


@pytest.fixture(scope="module")
def source_torch(torch213: TorchEnv) -> tuple[Path, str]:
    """A venv whose torch says it is a source build (2.13.0a0+git<rev>) of the 2.13 code.

    torch is a hard-linked copy of the cached 2.13.0 one with version.py and the dist-info
    rewritten and a direct_url.json pointing at a source tree, as `pip install .` in a
    pytorch checkout leaves it; its dependencies come from the cached env through a .pth.
    Kept in the cache (a stable interpreter path keeps its `current` toolchain reusable).
    """
    root = cache_dir() / "test-envs" / "torch-2.13.0a0-source-py3.11"
    python = root / "bin" / "python"
    site = root / "lib" / "python3.11" / "site-packages"
    src = torch213.site_packages
    text = (src / "torch" / "version.py").read_text()
    rev = text.split("git_version = '", 1)[1][:7]
    version = f"2.13.0a0+git{rev}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f".{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".buildtools-ready").is_file():
            shutil.rmtree(root, ignore_errors=True)
            venv_beside(src, torch213.python, root)
            shutil.copytree(src / "torch", site / "torch", copy_function=os.link, symlinks=True)
            (site / "torch" / "version.py").unlink()  # a hard link: never write through it
            (site / "torch" / "version.py").write_text(
                text.replace("__version__ = '2.13.0+cpu'", f"__version__ = '{version}'")
            )
            (old_info,) = src.glob("torch-2.13.0*.dist-info")
            info = site / f"torch-{version}.dist-info"
            shutil.copytree(old_info, info)
            meta = (info / "METADATA").read_text()
            (info / "METADATA").write_text(
                meta.replace("Version: 2.13.0+cpu", f"Version: {version}")
            )
            (info / "direct_url.json").write_text(
                json.dumps({"url": "file:///src/pytorch", "dir_info": {}})
            )
            (root / ".buildtools-ready").write_text(version + "\n")
    check = run_python(python, "import torch; print(torch.__version__, torch.__file__)")
    assert check.ok and version in check.output and str(site) in check.output, check.output
    return python, version


def test_source_built_torch_gets_a_source_build(
    source_torch: tuple[Path, str], ext_ok_213: Path, tmp_path: Path
) -> None:
    python, version = source_torch
    rev = version.rsplit("git", 1)[1]
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(ext_ok_213)],
        check=True,
    )
    matrix = tmp_path / "matrix.yaml"
    project = REPO / "tests" / "fixtures" / "ext_ok"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {project}, name: ext_ok}}
        axes: {{torch: [current], accelerator: [cpu], python: ["3.11"]}}
        index: {{base_url: "{INDEX}"}}
        """)
    )
    rc, report = doctor(python, "--matrix", str(matrix), cwd=tmp_path)
    assert report["torch"]["version"] == version and report["torch"]["build"] == "source"
    pkg = package(report, "ext_ok")
    # built for the 2.13.0 release; this is another build of 2.13: nothing proves either way
    assert pkg["verdict"] == "unknown", pkg
    assert [(f["code"], f["severity"]) for f in pkg["findings"]] == [("torch-mismatch", "warning")]
    assert rc == 0
    assert pkg["fix"]["commands"] == [
        f"nox -s build -- --torch current --torch-python {python} --project {project}",
        f"{python} -m pip install --no-deps --no-index -f wheelhouse "
        f"'ext_ok==0.1.0+pt213cpu.git{rev}'",
    ]


def test_build_against_the_current_source_torch(
    source_torch: tuple[Path, str], tmp_path: Path
) -> None:
    """`torch: current`: a venv that imports that torch (never installs one), same repair and checks."""
    python, version = source_torch
    rev = version.rsplit("git", 1)[1]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {REPO / "tests" / "fixtures" / "ext_ok"}, name: ext_ok}}
        axes: {{torch: [current], accelerator: [cpu], python: ["3.11"]}}
        """)
    )
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        *("build", "--matrix", str(matrix), "--torch-python", str(python)),
        *("--wheelhouse", str(wheelhouse), "--no-live"),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "BUILDTOOLS_CACHE_DIR": str(cache_dir())},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads((wheelhouse / "report.json").read_text())
    (cell,) = run["cells"]
    assert cell["cell"] == f"torch{version}-current-cpu-cp311"
    assert cell["status"] == "built"
    assert not [f for f in cell["findings"] if f["severity"] == "error"]
    wheel = Path(cell["wheel"])
    assert wheel.name.startswith(f"ext_ok-0.1.0+pt213cpu.git{rev}-cp311-cp311-")
    record = read_build_record(wheel)
    assert record is not None
    assert record.torch == version and record.torch_requirement == "torch==2.13.0a0"
    log = Path(cell["log"]).read_text()
    assert "nothing is installed into that environment" in log or "reusing" in log
    pip_args = [
        line.split(" -m pip install", 1)[1]
        for line in log.splitlines()
        if line.startswith("$ ") and " -m pip install" in line
    ]
    assert not [a for a in pip_args if "torch" in a], pip_args  # torch is never installed

    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--force-reinstall",
            str(wheel),
        ],
        check=True,
    )
    rc, report = doctor(python, cwd=tmp_path)
    pkg = package(report, "ext_ok")
    assert pkg["verdict"] == "healthy", pkg
    assert rc == 0
    proof = run_python(python, "import torch, ext_ok; print(ext_ok.add_one(torch.zeros(1)))")
    assert proof.ok and "tensor([1.])" in proof.output, proof.output


def test_plan_torch_current_probes_the_named_environment(
    torch213: TorchEnv, tmp_path: Path
) -> None:
    """`--torch current` replaces the reference matrix's torch axis and its default profile."""
    proc = buildtools(
        *("plan", "--matrix", str(REPO / "matrix.yaml"), "--torch", "current", "--format", "json"),
        cwd=tmp_path,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "BUILDTOOLS_TORCH_PYTHON": str(torch213.python),
        },
    )
    assert proc.returncode == 0, proc.stderr
    (job,) = json.loads(proc.stdout)["include"]
    assert job["id"] == "torch2.13.0+cpu-current-cpu-cp311"
    assert job["torch_source"] == "current"
    assert job["local_version"] == "pt213cpu.local"
    assert job["torch_requirement"] == "torch==2.13.0+cpu"
    assert job["requires_dist"] == "torch==2.13.*"
