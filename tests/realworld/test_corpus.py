"""Third-party extensions, unmodified, through init → build → check → their own tests.

Opt-in (`-m realworld`, or `nox -s realworld`): each builds its CPU cell for torch 2.13.0 on
this machine's Python, which takes minutes; with BUILDTOOLS_TEST_CUDA=1 as well, each compiled
one builds its CUDA cell (torch 2.11.0+cu130, Python 3.12, sm_90), tens of minutes. The published sdist is fetched once with
`pip download --no-deps --no-binary :all:` (metadata needs torch, so pip runs in an
interpreter that has it: BUILDTOOLS_REALWORLD_PIP_PYTHON, else this one) into
~/.cache/torch-buildtools/realworld/sdists and verified against the pinned sha256. A row
per extension goes to ~/.cache/torch-buildtools/realworld/results/ for docs/realworld.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from buildtools.wheel.elf import inspect_elf

from .corpus import CORPUS, CUDA_CELL, CUDA_EDITS, Extension

pytestmark = pytest.mark.realworld

CACHE = Path(os.environ.get("BUILDTOOLS_CACHE_DIR", Path.home() / ".cache" / "torch-buildtools"))
SDISTS = CACHE / "realworld" / "sdists"
RESULTS = CACHE / "realworld" / "results"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(ext: Extension) -> Path:
    """The pinned sdist, from the cache or PyPI; a hash mismatch is a failure, never a reuse."""
    path = SDISTS / ext.sdist
    if not path.is_file():
        SDISTS.mkdir(parents=True, exist_ok=True)
        python = os.environ.get("BUILDTOOLS_REALWORLD_PIP_PYTHON", sys.executable)
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--no-build-isolation",
                "-d",
                str(SDISTS),
                f"{ext.name}=={ext.version}",
            ],
            check=True,
            timeout=600,
        )
    digest = _sha256(path)
    assert digest == ext.sha256, f"{path}: sha256 {digest}, pinned {ext.sha256}"
    return path


def run(argv: list[str], cwd: Path, timeout: float = 3000) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, text=True, capture_output=True, check=False, timeout=timeout
    )


def prepare(ext: Extension, tmp_path: Path, edits: tuple[tuple[str, str, str], ...]) -> Path:
    """The unpacked sdist with the matrix.yaml `buildtools init` wrote, `edits` applied."""
    with tarfile.open(fetch(ext)) as tar:
        tar.extractall(tmp_path, filter="data")
    (src,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    init = run([sys.executable, "-m", "buildtools", "init", str(src)], cwd=tmp_path)
    assert init.returncode == 0, init.stdout + init.stderr
    (src / "init.txt").write_text(init.stdout)
    matrix = src / "matrix.yaml"
    text = matrix.read_text()
    for old, new, _why in edits:
        assert old in text, f"edit {old!r} no longer applies"
        text = text.replace(old, new)
    matrix.write_text(text)
    return src


def build(src: Path, wheelhouse: Path, row: dict[str, object], *select: str) -> int:
    """`buildtools build` of the selection; its time, cells, findings and wheels into row."""
    started = time.monotonic()
    proc = run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "build",
            "--matrix",
            str(src / "matrix.yaml"),
            "--wheelhouse",
            str(wheelhouse),
            "--no-live",
            *select,
        ],
        cwd=src,
    )
    row["build_seconds"] = round(time.monotonic() - started)
    row["build_tail"] = (proc.stdout[-2000:], proc.stderr[-2000:])
    report = json.loads((wheelhouse / "report.json").read_text())
    cells = [c for c in report["cells"] if c["status"] != "excluded-by-compat"]
    row["cells"] = [c["cell"] for c in cells]
    row["status"] = [c["status"] for c in cells]
    row["findings"] = sorted({f"{f['severity']} {f['code']}" for c in cells for f in c["findings"]})
    row["finding_messages"] = sorted({f["message"] for c in cells for f in c["findings"]})
    wheels = sorted(wheelhouse.glob("*.whl"))
    row["wheels"] = [w.name for w in wheels]
    row["wheel_bytes"] = [w.stat().st_size for w in wheels]
    return proc.returncode


@pytest.mark.parametrize("ext", CORPUS, ids=[e.name for e in CORPUS])
def test_extension_builds_unmodified_and_passes_its_tests(ext: Extension, tmp_path: Path) -> None:
    src = prepare(ext, tmp_path, ext.edits)
    matrix = src / "matrix.yaml"
    row: dict[str, object] = {"name": ext.name, "version": ext.version, "style": ext.style}
    row["init"] = (src / "init.txt").read_text()
    wheelhouse = tmp_path / "wheelhouse"
    returncode = build(src, wheelhouse, row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result_file = RESULTS / f"{ext.name}.json"
    result_file.write_text(json.dumps(row, indent=1))
    if ext.pure is not None:
        # nothing to compile: the build says so in one line instead of an auditwheel error
        assert returncode == 8 and "produced a pure-Python wheel" in str(row["build_tail"])
        row["explained"] = ext.pure
        result_file.write_text(json.dumps(row, indent=1))
        return
    assert returncode == 0, row["build_tail"]
    smoke = run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "smoke",
            str(wheelhouse),
            "--matrix",
            str(matrix),
            "--out",
            str(tmp_path / "smoke"),
            "--accelerator",
            "cpu",
            # a project's whole suite on a loaded 2-core machine: torchlpc's gradchecks
            # took more than the default 600 s
            "--timeout",
            "2400",
        ],
        cwd=src,
    )
    smoke_report = json.loads((tmp_path / "smoke" / "report.json").read_text())
    row["smoke_command"] = smoke_report.get("smoke_command")
    row["smoke"] = [(r["cell"], r["status"], r["diagnosis"]) for r in smoke_report["results"]]
    row["smoke_tail"] = [r["output"][-1500:] for r in smoke_report["results"]]
    result_file.write_text(json.dumps(row, indent=1))
    shutil.rmtree(tmp_path / "smoke" / "logs", ignore_errors=True)
    assert smoke.returncode == 0, smoke.stdout[-3000:] + smoke.stderr[-3000:]


def device_archs(wheelhouse: Path) -> set[str]:
    """The CUDA archs the wheels' objects carry, read apart from the no-device-code check."""
    archs: set[str] = set()
    for wheel in wheelhouse.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if ".so" in name.rsplit("/", 1)[-1]:
                    path = wheelhouse / "unpacked" / name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(zf.read(name))
                    info = inspect_elf(path)
                    if info.cuda is not None:
                        archs |= info.cuda.archs
    return archs


@pytest.mark.cuda_toolchain
@pytest.mark.parametrize(
    "ext", [e for e in CORPUS if e.cuda], ids=[e.name for e in CORPUS if e.cuda]
)
def test_cuda_cell_builds_with_device_code(ext: Extension, tmp_path: Path) -> None:
    """The CUDA cell on this CPU-only machine: built, repaired and checked, sm_90 code in it.

    No GPU here, so no smoke: the wheels go to a GPU machine (docs/realworld.md says what
    ran there). The `no-device-code` check fails a wheel without device code for every arch
    of the list, which is what a CPU-only build of a `torch.cuda.is_available()` setup.py
    would silently produce.
    """
    src = prepare(ext, tmp_path, ext.edits + CUDA_EDITS + ext.cuda_edits)
    row: dict[str, object] = {"name": ext.name, "version": ext.version, "cell": CUDA_CELL}
    wheelhouse = tmp_path / "wheelhouse"
    only = [arg for cell in ext.cuda_cells for arg in ("--only", cell)]
    returncode = build(src, wheelhouse, row, "--profile", "pr", *only)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{ext.name}-{CUDA_CELL}.json").write_text(json.dumps(row, indent=1))
    archs = device_archs(wheelhouse)
    row["device_archs"] = sorted(archs)
    (RESULTS / f"{ext.name}-{CUDA_CELL}.json").write_text(json.dumps(row, indent=1))
    keep = CACHE / "realworld" / "wheels" / CUDA_CELL
    keep.mkdir(parents=True, exist_ok=True)
    for wheel in wheelhouse.glob("*.whl"):  # for the GPU run
        shutil.copy2(wheel, keep / wheel.name)
    assert returncode == 0, row["build_tail"]
    assert row["cells"] == list(ext.cuda_cells), row
    statuses = row["status"]
    assert isinstance(statuses, list) and len(set(statuses)) == 1, row  # one job, one outcome
    assert statuses[0] in ("built", "skipped-unchanged"), row
    findings = row["findings"]
    assert isinstance(findings, list), findings
    assert not any(str(f).startswith("error") for f in findings), findings
    assert "sm_90" in archs, archs
