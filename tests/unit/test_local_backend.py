"""The local backend's reading of a project's own build requirements."""

from __future__ import annotations

from pathlib import Path

from buildtools.toolchain.buildrequires import extra_build_requirements


def test_build_requirements_the_job_environment_lacks(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\nrequires = ['not-this']\n\n"
        "[build-system]\n"
        'requires = [\n  "setuptools>=64",\n  "torch>=2.0",\n  "numpy",\n'
        '  "pybind11>=2.12; python_version >= \'3.0\'",\n  "ninja",\n'
        "  \"cffi; python_version < '3'\",\n]\n"
        'build-backend = "setuptools.build_meta"\n'
    )
    # torch and buildtools' own build tools come with the job's environment
    # as written: pip evaluates the markers with the job's Python (not this one's)
    assert extra_build_requirements(tmp_path) == [
        "numpy",
        "pybind11>=2.12; python_version >= '3.0'",
        "cffi; python_version < '3'",
    ]


def test_no_pyproject_or_no_build_system(tmp_path: Path) -> None:
    assert extra_build_requirements(tmp_path) == []
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    assert extra_build_requirements(tmp_path) == []


def test_nvcc_names_its_files_after_the_source_unless_two_share_a_name(tmp_path: Path) -> None:
    from buildtools.backends.base import nvcc_keep_env

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "k.cu").write_text("")
    (tmp_path / "build" / "x").mkdir(parents=True)
    (tmp_path / "build" / "x" / "k.cu").write_text("")  # a build tree's copy: not a source
    env = {"NVCC_APPEND_FLAGS": "--threads 2"}
    assert nvcc_keep_env(tmp_path / "keep", env, project_dir=tmp_path) == {
        "NVCC_APPEND_FLAGS": f"--threads 2 --keep --keep-dir {tmp_path / 'keep'}"
    }
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "k.cu").write_text("")  # two kernels named k.cu: their files would collide
    assert nvcc_keep_env(tmp_path / "keep", env, project_dir=tmp_path) == {}


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_provided_build_requirements_are_checked_against_the_environment(tmp_path: Path) -> None:
    from buildtools.toolchain.buildrequires import unmet_build_requirements

    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.11.0+cu130")
    _dist(site, "setuptools", "80.9.0")
    (tmp_path / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=64", "torch>=2.7", "numpy>=2", "wheel"]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    # numpy is installed from its own specifier (extra_build_requirements): not checked here
    assert unmet_build_requirements(tmp_path, site, "3.12.1") == [
        "wheel (wheel is not installed here)"
    ]
    (tmp_path / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools>=81', 'torch>=2.12', 'ninja; python_version < \"3\"']\n"
    )
    assert unmet_build_requirements(tmp_path, site, "3.12.1") == [
        "setuptools>=81 (setuptools 80.9.0 here)",
        "torch>=2.12 (torch 2.11.0+cu130 here)",
    ]
    # markers are the job's Python's, not the one running buildtools
    (tmp_path / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['wheel; python_version >= \"3.13\"', 'setuptools>=81']\n"
    )
    assert unmet_build_requirements(tmp_path, site, "3.12.1") == [
        "setuptools>=81 (setuptools 80.9.0 here)"
    ]
    assert unmet_build_requirements(tmp_path, site, "3.13.0") == [
        'wheel; python_version >= "3.13" (wheel is not installed here)',
        "setuptools>=81 (setuptools 80.9.0 here)",
    ]


def test_only_setuptools_projects_skip_builds_own_dependency_check(tmp_path: Path) -> None:
    from buildtools.toolchain.buildrequires import skips_dependency_check

    assert skips_dependency_check(tmp_path)  # a setup.py project: no pyproject.toml
    for backend, skips in (
        ("setuptools.build_meta", True),
        ("setuptools.build_meta:__legacy__", True),
        ("scikit_build_core.build", False),
        ("mesonpy", False),
    ):
        (tmp_path / "pyproject.toml").write_text(
            f"[build-system]\nrequires = ['x']\nbuild-backend = '{backend}'\n"
        )
        assert skips_dependency_check(tmp_path) is skips, backend
    (tmp_path / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools']\n")
    assert skips_dependency_check(tmp_path)


def _report(tmp_path: Path, items: object) -> Path:
    import json

    path = tmp_path / "report.json"
    path.write_text(json.dumps({"version": "1", "install": items}))
    return path


def test_resolved_pins_from_pips_report(tmp_path: Path) -> None:
    import pytest

    from buildtools.backends.local import resolved_pins
    from buildtools.errors import BuildFailedError

    def item(name: str, version: str) -> dict[str, object]:
        return {"metadata": {"name": name, "version": version}, "requested": False}

    ok = _report(tmp_path, [item("setuptools-scm", "10.3.4"), item("vcs_versioning", "2.6")])
    assert resolved_pins(ok, protected={"torch"}, what="x") == [
        "setuptools-scm==10.3.4",
        "vcs_versioning==2.6",
    ]
    # the report is untrusted: what is not a name or a version never reaches pip's argv
    for bad in (item("--index-url=http://evil", "1"), item("x", "1; rm -rf /"), item("", "1")):
        with pytest.raises(BuildFailedError, match="pip's report names"):
            resolved_pins(_report(tmp_path, [bad]), protected=set(), what="x")
    with pytest.raises(BuildFailedError, match="unreadable"):
        resolved_pins(_report(tmp_path, [{"metadata": {}}]), protected=set(), what="x")
    # replacing the job's torch (or what torch requires) is refused, by canonical name
    replace = _report(tmp_path, [item("Triton", "3.6.0")])
    with pytest.raises(BuildFailedError, match="would replace the job's own Triton"):
        resolved_pins(replace, protected={"torch", "triton"}, what="x")


def test_a_build_system_pip_could_not_read_is_one_clear_line(tmp_path: Path) -> None:
    import pytest

    from buildtools.errors import ConfigError

    pyproject = tmp_path / "pyproject.toml"
    for text, message in (
        ("[build-system\n", "not readable as TOML"),
        ("[build-system]\nrequires = 'setuptools'\n", "requires must be a list of strings"),
        ("[build-system]\nrequires = ['x; rm -rf /']\n", "'x; rm -rf /' is not a requirement"),
        ("[build-system]\nbuild-backend = 3\n", "build-backend must be a string"),
    ):
        pyproject.write_text(text)
        with pytest.raises(ConfigError, match=message) as info:
            extra_build_requirements(tmp_path)
        assert str(info.value).startswith(f"{pyproject}: ")
    # a quoted name in a comment is not a requirement (TOML is parsed, not scanned)
    pyproject.write_text("[build-system]\nrequires = [\n  'numpy',  # not 'scipy'\n]\n")
    assert extra_build_requirements(tmp_path) == ["numpy"]
