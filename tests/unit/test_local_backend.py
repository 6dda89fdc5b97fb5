"""The local backend's reading of a project's own build requirements."""

from __future__ import annotations

from pathlib import Path

from buildtools.backends.local import extra_build_requirements


def test_build_requirements_the_job_environment_lacks(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\nrequires = ['not-this']\n\n"
        "[build-system]\n"
        'requires = [\n  "setuptools>=64",\n  "torch>=2.0",\n  "numpy",\n'
        '  "pybind11>=2.12; python_version >= \'3.0\'",\n  "ninja",\n]\n'
        'build-backend = "setuptools.build_meta"\n'
    )
    # torch and buildtools' own build tools come with the job's environment
    assert extra_build_requirements(tmp_path) == [
        "numpy",
        "pybind11>=2.12; python_version >= '3.0'",
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
