"""`buildtools init` on hostile repositories (issue 44's init classes): every file read in
time linear in its size, no symbolic link out of the repository followed, no package name
pasted into a command, no traceback for a bad `--torch`."""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildtools.adopt import inspect_project
from buildtools.cli import main as cli
from buildtools.errors import ExitCode, UnsafeArtefactError
from buildtools.files import read_within

BLANK = "\n" * 300_000


@pytest.fixture
def deadline() -> Iterator[None]:
    """A quadratic scan becomes a failure after 110 s instead of blocking the suite: the
    linear code reads every file below in seconds; the patterns it replaced ran past 120 s
    on the setup.py alone (one of them: 0.94 s for 20,000 blank lines, x15 per x2)."""

    def fail(signum: int, frame: object) -> None:
        raise TimeoutError("init on 300,000 blank lines ran past 110 s: a quadratic scan")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(110)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("deadline")
def test_300000_blank_lines_in_every_file_init_reads(tmp_path: Path) -> None:
    root = tmp_path / "blank"
    (root / "csrc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "blank_ops").mkdir()
    (root / "blank_ops" / "__init__.py").write_text("")
    (root / "setup.py").write_text(
        "import os\n"
        + BLANK
        + "from setuptools import setup\n"
        + BLANK
        + "py_limited_api = False\n"
        + 'cc = ["-gencode", "arch=compute_80,code=sm_80"]\n'
        + "setup(\n"
        + BLANK
        + '    name="blank-ops",\n)\n'
        + "call("
        + BLANK
        + ")\n"
        + 'x = os.getenv("'
        + "FORCE_BUILD" * 20_000
        + "\n"
    )
    (root / "pyproject.toml").write_text(
        BLANK + "[build-system]\n" + BLANK + 'build-backend = "setuptools.build_meta"\n'
        "[project]\n" + BLANK + 'name = "blank-ops"\n'
    )
    (root / "setup.cfg").write_text(BLANK)
    (root / "CMakeLists.txt").write_text("if(A)\n" + BLANK + "set(CMAKE_CUDA_ARCHITECTURES 90)\n")
    (root / "build.sh").write_text(BLANK + "nvcc -arch=sm_90\n")
    (root / "csrc" / "ops.cmake").write_text(
        "if(" + "CUDA" * 50_000 + " VERSION_LESS 12)\nset(CMAKE_CUDA_ARCHITECTURES 70)\nendif()\n"
    )
    (root / "csrc" / "k.cu").write_text("/*" * 50_000 + BLANK + "//" + BLANK)
    (root / "csrc" / "k.cpp").write_text("#include <torch/extension.h>\n" + BLANK)
    (root / "tests" / "test_x.py").write_text("import numpy\n" + BLANK + "import einops\n")
    found = inspect_project(root)
    assert found.name == "blank-ops" and found.backend == "setuptools"
    assert found.module == "blank_ops" and found.smoke_requires == ("numpy", "einops")
    assert found.limited_api is None
    assert sorted((f.file, f.line) for f in found.arch_flags) == [
        ("CMakeLists.txt", 300_002),
        ("build.sh", 300_001),
        ("csrc/ops.cmake", 2),
        ("setup.py", 600_004),
    ]
    out = io.StringIO()
    assert cli.main(["init", str(root), "--dry-run", "--torch", "2.11.0"], out=out) == 0
    # setup.py runs no cmake: the CMake files' settings are listed, not counted (its -gencode is)
    assert "CUDA 13.0 build compiles: 8.0\n" in out.getvalue()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "__init__.py").write_text("")
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='ops')\n")
    return root


@pytest.mark.parametrize("name", ["setup.py", "pyproject.toml", "matrix.yaml", "noxfile.py"])
def test_a_file_linked_out_of_the_repository_is_refused(
    repo: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("version: 1\nTOKEN=hunter2\n")
    target = repo / name
    target.unlink(missing_ok=True)
    target.symlink_to(secret)
    assert cli.main(["init", str(repo), "--dry-run"]) == ExitCode.UNSAFE_ARTEFACT
    err = capsys.readouterr().err
    assert f"{target}: a symbolic link leads out of {repo}" in err and "refusing" in err
    assert len(err.strip().splitlines()) == 1 and "hunter2" not in err


def test_links_inside_the_repository_are_followed(repo: Path) -> None:
    (repo / "build").mkdir()
    real = repo / "build" / "setup_real.py"
    (repo / "setup.py").rename(real)
    (repo / "setup.py").symlink_to("build/setup_real.py")
    assert inspect_project(repo).name == "ops"
    assert read_within(repo, "setup.py", max_bytes=100).startswith(b"from setuptools")


def test_a_directory_link_out_is_refused_by_read_within(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.py").write_text("print('outside')\n")
    (repo / "linked").symlink_to(outside)
    with pytest.raises(UnsafeArtefactError, match="leads out of"):
        read_within(repo, "linked/x.py", max_bytes=100)
    with pytest.raises(UnsafeArtefactError, match="climbs out"):
        read_within(repo, "../elsewhere/x.py", max_bytes=100)


def test_a_source_linked_out_is_not_read(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.cu"
    outside.write_text("const_data_ptr<float>()\n")
    (repo / "csrc").mkdir()
    (repo / "csrc" / "k.cu").symlink_to(outside)
    (repo / "csrc" / "a.cpp").write_text("#include <torch/extension.h>\n")
    out = io.StringIO()
    assert cli.main(["init", str(repo), "--dry-run", "--torch", "2.0.1"], out=out) == 0
    assert "const_data_ptr" not in out.getvalue()  # the outside file was never read


def test_a_package_name_that_is_code_never_reaches_the_smoke_command(tmp_path: Path) -> None:
    root = tmp_path / "inj"
    bad = root / "x;__import__('os').system('touch pwned')"
    bad.mkdir(parents=True)
    (bad / "__init__.py").write_text("")
    (root / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    found = inspect_project(root)
    assert found.module is None
    assert found.notes == (
        f"package directory {bad.name!r} is not a Python identifier: left out of project.smoke",
    )
    out = io.StringIO()
    assert cli.main(["init", str(root)], out=out) == 0
    matrix = (root / "matrix.yaml").read_text()
    assert "__import__" not in matrix and "\n  smoke:" not in matrix
    assert "note: package directory" in out.getvalue()
    # a sane package beside it is the one imported
    (root / "good_ops").mkdir()
    (root / "good_ops" / "__init__.py").write_text("")
    assert inspect_project(root).module == "good_ops"
    # a setup.py name that is no identifier is not a module guess either
    (root / "good_ops" / "__init__.py").unlink()
    (root / "setup.py").write_text('from setuptools import setup\nsetup(name="class")\n')
    assert inspect_project(root).module is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("9.99.0", "'9.99.0' is not a torch release buildtools knows"),
        ("2.11.0\nx", "is not a torch release"),
        (">=99", "'>=99' holds no torch release"),
        (">=2.1,,<", "is not a version range"),
        ("current", "'current' is not a torch release buildtools knows"),
    ],
)
def test_bad_torch_values_are_one_line_and_exit_2(
    repo: Path, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["init", str(repo), "--dry-run", "--torch", value])
    assert exc.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("buildtools init: error: argument --torch")


def test_torch_as_a_minor_or_a_range(repo: Path) -> None:
    out = io.StringIO()
    argv = ["init", str(repo), "--dry-run", "--torch", ">=2.9,<2.11", "--torch", "2.11"]
    assert cli.main(argv, out=out) == 0
    torch_line = next(line for line in out.getvalue().splitlines() if "  torch: [" in line)
    assert torch_line.startswith('  torch: ["2.9.')
    assert '"2.10.' in torch_line and '"2.11.' in torch_line
