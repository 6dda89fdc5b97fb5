"""Skip-unchanged for real: a second build with nothing changed is skipped, and any change
that reaches the wheel (a source file, a build_env value) rebuilds; --force rebuilds.

One copy of the example and one wheelhouse per module; the toolchain environment is the
shared cached one, build trees and the compiler cache live in a temporary cache dir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import HOST, REPO, buildtools
from fixtures.envs import cache_dir


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.src = root / "src"
        shutil.copytree(
            REPO / "examples" / "scatter",
            self.src,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
        self.cache = root / "cache"
        self.cache.mkdir()
        envs = cache_dir() / "envs"
        envs.mkdir(parents=True, exist_ok=True)
        (self.cache / "envs").symlink_to(envs)
        self.wheelhouse = root / "wheelhouse"
        self.write_matrix({})

    def write_matrix(self, build_env: dict[str, str]) -> None:
        pairs = ", ".join(f"{k}: {json.dumps(v)}" for k, v in build_env.items())
        (self.root / "matrix.yaml").write_text(
            textwrap.dedent(f"""\
            project:
              path: src
              abi: per-python
              build_env: {{{pairs}}}
            axes:
              torch: ["2.13.0"]
              accelerator: [cpu]
              python: ["{HOST}"]
            """)
        )

    def build(self, *extra: str) -> dict[str, object]:
        proc = buildtools(
            *("build", "--matrix", str(self.root / "matrix.yaml")),
            *("--wheelhouse", str(self.wheelhouse), "--cache-dir", str(self.cache), "--no-live"),
            *extra,
            cwd=self.root,
            # the compiler cache is the one under --cache-dir, not the caller's
            env={k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"},
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        report = json.loads((self.wheelhouse / "report.json").read_text())
        (cell,) = report["cells"]
        assert isinstance(cell, dict)
        return cell

    def record(self, wheel: str) -> dict[str, object]:
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/buildtools.json"))
            data: dict[str, object] = json.loads(zf.read(name))
        return data


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(tmp_path_factory.mktemp("incremental"))


def test_first_build_records_the_job_fingerprint(project: Project) -> None:
    cell = project.build()
    assert cell["status"] == "built"
    record = project.record(str(cell["wheel"]))
    assert str(record["fingerprint"]).startswith("sha256:")
    assert str(record["source_fingerprint"]).startswith("sha256:")


def test_nothing_changed_is_skipped(project: Project) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in project.wheelhouse.glob("*.whl")}
    cell = project.build()
    assert cell["status"] == "skipped-unchanged"
    assert "--force rebuilds" in str(cell["reason"])
    assert {p.name: p.stat().st_mtime_ns for p in project.wheelhouse.glob("*.whl")} == before


def test_force_rebuilds(project: Project) -> None:
    assert project.build("--force")["status"] == "built"


def test_a_changed_source_file_rebuilds(project: Project) -> None:
    old = project.record(str(project.build()["wheel"]))["fingerprint"]
    cpp = project.src / "csrc" / "scatter.cpp"
    cpp.write_text(
        cpp.read_text() + "\nnamespace { [[maybe_unused]] int edited() { return 1; } }\n"
    )
    cell = project.build()
    assert cell["status"] == "built"
    assert project.record(str(cell["wheel"]))["fingerprint"] != old
    assert project.build()["status"] == "skipped-unchanged"


def test_a_changed_build_env_rebuilds(project: Project) -> None:
    project.write_matrix({"BT_UNUSED_SETTING": "1"})
    assert project.build()["status"] == "built"
    assert project.build()["status"] == "skipped-unchanged"
    project.write_matrix({"BT_UNUSED_SETTING": "2"})
    assert project.build()["status"] == "built"


def test_the_plan_json_names_the_compiler_cache(project: Project) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "plan",
            "--matrix",
            str(project.root / "matrix.yaml"),
            "--format",
            "json",
        ],
        text=True,
        capture_output=True,
        check=True,
    )
    (job,) = json.loads(proc.stdout)["include"]
    assert job["ccache_key"] == job["id"]


def test_a_wheel_published_with_the_same_fingerprint_is_not_rebuilt(project: Project) -> None:
    assert project.build()["status"] == "skipped-unchanged"
    site = project.root / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "index",
            str(project.wheelhouse),
            "--site",
            str(site),
            "--no-matrix",
        ],
        text=True,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    project.wheelhouse = project.root / "fresh-wheelhouse"  # nothing built here yet
    cell = project.build("--index-site", str(site))
    assert cell["status"] == "skipped-unchanged"
    assert "the index has a wheel" in str(cell["reason"])
    assert Path(str(cell["wheel"])).is_file()
    assert Path(str(cell["wheel"])).parent == site / "wheels"
