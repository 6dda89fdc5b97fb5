"""The machinery of `nox -s ci-run` (ci/act-run.py): the run's repository, the action
cache, the runner's tool cache and base image, one act invocation and its outcome, and the
fake GitHub it talks to. See docs/ci.md, "The pipeline run locally"."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "ci" / "act"
# where the pinned actions' repositories come from: GitHub, where a user runs this; a
# directory of mirrors (`--mirror DIR/{owner}+{name}`: one git directory per action) or
# another URL template is an option (docs/ci.md, "The pipeline run locally")
DEFAULT_MIRROR = "https://github.com/{owner}/{name}"
DEFAULT_CELL = "torch2.13.0-cpu-cp311"
# actions whose pinned code cannot run here, and why (listed in every run's summary)
STANDINS = {
    "actions/upload-artifact": "dist/ bundle of the pinned commit absent from the mirror",
    "actions/download-artifact": "dist/ bundle of the pinned commit absent from the mirror",
    "actions/attest-build-provenance": "Sigstore signing needs GitHub's OIDC token",
    "actions/upload-pages-artifact": "GitHub Pages only",
    "actions/deploy-pages": "GitHub Pages only (OIDC token)",
    "pypa/gh-action-pypi-publish": "trusted publishing needs GitHub's OIDC token",
}
HOSTED = ("ubuntu-24.04", "ubuntu-latest")


def log(message: str) -> None:
    print(f"ci-run: {message}", flush=True)


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    out: Path | None = None,
) -> int:
    """A child with a deadline, in its own process group, killed with its group on expiry."""
    stdout = open(out, "ab") if out else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log(f"{argv[0]}: killed after {timeout:.0f} s")
            return 124
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the child's group goes too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    finally:
        if stdout:
            stdout.close()


def capture(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 300.0) -> str:
    done = subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"ci-run: {' '.join(argv[:3])}…: {done.stderr.strip()[-400:]}")
    return done.stdout


def snapshot(work: Path) -> Path:
    """This checkout as act sees it on GitHub: a commit of the tracked + unignored files."""
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    names = capture(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT)
    for name in filter(None, names.split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            dest = repo / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", "init", "-q", "-b", "main"], cwd=repo)
    capture(["git", "add", "-A"], cwd=repo)
    capture(["git", *ident, "commit", "-q", "-m", "ci-run snapshot"], cwd=repo)
    capture(
        ["git", "remote", "add", "origin", "https://github.com/local/torch-buildtools"], cwd=repo
    )
    return repo


def action_cache(work: Path, mirror: str) -> list[str]:
    """act's --local-repository arguments: the pinned actions, and the stand-ins."""
    out = work / "actions"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "ci" / "act-actions.py"),
            "--source",
            mirror,
            "--out",
            str(out),
            *[f"--allow-missing={name}" for name in STANDINS],
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit("ci-run: the action cache could not be made (above)")
    args: list[str] = []
    exported = {}
    for line in done.stdout.splitlines():
        spec = line.split(" ", 1)[1]
        exported[spec.split("@", 1)[0]] = spec
    from buildtools.workflows.pins import load_pins

    for name, pin in load_pins().actions.items():
        if name in STANDINS:
            standin = HERE / "standins" / name.split("/", 1)[1]
            args += ["--local-repository", f"{name}@{pin.sha}={standin}"]
        elif name in exported:
            args += ["--local-repository", exported[name]]
        else:
            raise SystemExit(f"ci-run: {name}@{pin.sha}: not in the action cache")
    return args


def tool_cache(work: Path) -> Path:
    """$RUNNER_TOOL_CACHE/Python/X.Y.Z/x64: a venv over each CPython of this machine.

    setup-python looks there first (tc.find) and downloads only on a miss; a venv keeps
    the jobs' pip installs out of the machine's own interpreters.
    """
    cache = work / "toolcache"
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
        found = sorted(pyenv.glob(f"{minor}.*/bin/python{minor}"))
        exe = str(found[-1]) if found else shutil.which(f"python{minor}")
        if not exe:
            continue
        try:
            info = capture(
                [
                    exe,
                    "-c",
                    "import sys;print('%d.%d.%d' % sys.version_info[:3]);print(sys.base_prefix)",
                ]
            ).split()
        except (SystemExit, subprocess.TimeoutExpired):
            continue
        version, prefix = info[0], info[1]
        home = cache / "Python" / version / "x64"
        if not (home / "bin" / "python").exists():
            capture([str(Path(prefix) / "bin" / f"python{minor}"), "-m", "venv", str(home)])
        home.with_name("x64.complete").touch()
    return cache


def base_image(repo: Path, cell: str, given: str | None, work: Path) -> tuple[str, Path, Any]:
    """The builder base of `cell`, pinned by digest as a release requires.

    No registry serves the manylinux builders here; docker/local-base.sh makes a
    "manylinux-like" Debian image instead, pushed to a registry on loopback
    (`registry.py`, which docker reaches without configuration). The snapshot's matrix.yaml
    names it as the CPU family's `image` (a commit in the snapshot) and the pins file the
    runs get (BUILDTOOLS_IMAGE_PINS) names its digest, so every build pulls it
    `FROM 127.0.0.1:PORT/bt-base:cpu@sha256:…` as a runner would from Docker Hub.
    Returns (the image, the pins file, the registry: its `forget` drops the manifest, as a
    registry does once the tag was pushed again).
    """
    from registry import serve
    from ruamel.yaml import YAML

    out = work / "entries.json"
    capture(
        [
            sys.executable,
            "-m",
            "buildtools",
            "ci",
            "matrix",
            "--profile",
            "pr",
            "--workflow",
            "pull-request",
            "--entries-json",
            str(out),
        ],
        cwd=repo,
    )
    entries = json.loads(out.read_text())
    entry = next((e for e in entries["build"] if e["id"] == cell), None)
    if entry is None or entry["family"] != "cpu":
        raise SystemExit(
            f"ci-run: --cell {cell}: not a CPU build job of the pr profile "
            f"({', '.join(e['id'] for e in entries['build'] if e['family'] == 'cpu')})"
        )
    tag = re.search(r"-cp(\d)(\d+)", cell)
    if tag is None:
        raise SystemExit(f"ci-run: --cell {cell}: no cpXY in the id")
    python = f"{tag.group(1)}.{tag.group(2)}"
    local = (
        given
        or capture(
            ["bash", str(ROOT / "docker" / "local-base.sh"), "--python", python], timeout=1800
        )
        .strip()
        .splitlines()[-1]
    )
    registry, server = serve()
    image = f"127.0.0.1:{server.server_address[1]}/bt-base:cpu"
    capture(["docker", "tag", local, image])
    capture(["docker", "push", image], timeout=1800)
    capture(["docker", "rmi", image])  # the builds pull it by digest, as from a registry
    digest = next(d for (name, d) in registry.manifests if name == "bt-base" and "@" not in d
                  and d.startswith("sha256:"))  # fmt: skip
    pins = work / "image_pins.yaml"
    pins.write_text(f"pins:\n- image: {image}\n  digest: '{digest}'\n", encoding="utf-8")
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    path = repo / "matrix.yaml"
    data = yaml.load(path.read_text(encoding="utf-8"))
    data["accelerators"]["cpu"]["image"] = image
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    capture([sys.executable, "-m", "buildtools", "ci", "github"], cwd=repo)
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", *ident, "commit", "-q", "-am", f"ci-run: the CPU base is {image}"], cwd=repo)
    return f"{image}@{digest}", pins, (registry, server)


def narrow_pr_profile(repo: Path, work: Path, cell: str) -> str:
    """The `pr` profile of the snapshot's matrix.yaml narrowed to `cell`, workflows regenerated.

    act cannot run a subset of a matrix faithfully: a job whose matrix `--matrix` filters
    to nothing reports no result at all, which the status job rightly counts as a failure.
    So the pull-request workflow run here is the one `buildtools ci github` generates for a
    `pr` profile of this one CPU cell (a commit in the snapshot; its diff is printed).
    """
    from ruamel.yaml import YAML

    entries = json.loads((work / "entries.json").read_text())
    entry = next(e for e in entries["build"] if e["id"] == cell)
    tag = re.fullmatch(r"cp(\d)(\d+)", str(entry["python_tag"]))
    if tag is None:
        raise SystemExit(f"ci-run: {cell}: python_tag {entry['python_tag']!r}")
    select = {
        "torch": entry["torch"],
        "accelerator": entry["accelerator"],
        "python": f"{tag.group(1)}.{tag.group(2)}",
        "platform": entry["platform"],
    }
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    path = repo / "matrix.yaml"
    data = yaml.load(path.read_text(encoding="utf-8"))
    data["profiles"]["pr"]["select"] = [select]
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    capture([sys.executable, "-m", "buildtools", "ci", "github"], cwd=repo)
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", *ident, "commit", "-q", "-am", f"ci-run: the pr profile is {cell}"], cwd=repo)
    return capture(["git", "show", "--stat", "--format=", "HEAD"], cwd=repo)


def act_args(work: Path, run: Path, lr: list[str], extra_env: dict[str, str]) -> list[str]:
    # the runner's PATH: this machine's, less the virtual environment running this script
    host_path = [
        p
        for p in os.environ.get("PATH", "/usr/bin:/bin").split(":")
        if p and not p.startswith(sys.prefix) and not p.startswith(str(ROOT))
    ]
    env = {
        "RUNNER_TOOL_CACHE": str(work / "toolcache"),
        "AGENT_TOOLSDIRECTORY": str(work / "toolcache"),
        "HOME": str(run / "home"),
        "PATH": ":".join([str(HERE / "bin"), *host_path]),
        "BT_ACT_PYTHON": sys.executable,
        "BT_ACT_HOME": str(HERE),
        "BT_ACT_LOG": str(run / "standins.jsonl"),
        "BT_ACT_ARTIFACTS": str(run / "artifacts"),
        "BT_ACT_RUNNER_ENVIRONMENT": "github-hosted",
        **extra_env,
    }
    args = [f"-P{label}=-self-hosted" for label in HOSTED]
    args += [
        "--action-offline-mode",
        "--action-cache-path",
        str(work / "actcache"),
        "--cache-server-path",
        str(work / "cacheserver"),
        *lr,
    ]
    for key, value in env.items():
        args += ["--env", f"{key}={value}"]
    return args


class Outcome:
    def __init__(
        self, name: str, expect: str, rc: int, seconds: float, log_file: Path, run: Path
    ) -> None:
        self.name, self.expect, self.rc, self.seconds = name, expect, rc, seconds
        self.log_file, self.run = log_file, run
        text = log_file.read_text(errors="replace")
        self.jobs: dict[str, str] = {}
        for line in text.splitlines():
            if "🏁" in line and line.startswith("["):
                job = line[1 : line.index("]")].split("/", 1)[1].strip()
                self.jobs[job] = "succeeded" if "succeeded" in line else "failed"
        self.problems: list[str] = []

    def require(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)

    def job(self, prefix: str) -> str:
        found = [v for k, v in self.jobs.items() if k.startswith(prefix)]
        return "failed" if "failed" in found else (found[0] if found else "not run")


def act(
    name: str,
    work: Path,
    repo: Path,
    lr: list[str],
    *,
    event: str,
    workflow: str,
    payload: dict[str, object],
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    expect: str = "success",
    timeout: float = 5400.0,
    before: Callable[[Path], None] | None = None,
) -> Outcome:
    """One act run; `before(run_dir)` prepares its directories first (HOME: `run_dir/home`,
    which every job of the run shares, as on a persistent self-hosted runner)."""
    run_dir = work / "runs" / name.replace(" ", "-")
    shutil.rmtree(run_dir, ignore_errors=True)
    for sub in ("home", "artifacts"):
        (run_dir / sub).mkdir(parents=True)
    if before is not None:
        before(run_dir)
    (run_dir / "standins.jsonl").touch()
    (run_dir / "event.json").write_text(json.dumps(payload))
    argv = [
        str(Path(sys.executable).with_name("act"))
        if Path(sys.executable).with_name("act").exists()
        else "act",
        event,
        "-W",
        f".github/workflows/{workflow}",
        "-e",
        str(run_dir / "event.json"),
        *act_args(
            work,
            run_dir,
            lr,
            {"BT_ACT_WORKFLOW_FILE": f".github/workflows/{workflow}", **(env or {})},
        ),
        *extra,
    ]
    log(f"{name}: act {event} -W .github/workflows/{workflow} … (log: {run_dir / 'act.log'})")
    start = time.monotonic()
    rc = run(argv, cwd=repo, timeout=timeout, out=run_dir / "act.log")
    outcome = Outcome(name, expect, rc, time.monotonic() - start, run_dir / "act.log", run_dir)
    log(f"{name}: exit {rc} after {outcome.seconds:.0f} s; jobs: {outcome.jobs}")
    return outcome


def repository_of(repo: Path) -> str:
    """OWNER/REPO the index's base_url implies (a github.io project site), else local/…"""
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load((repo / "matrix.yaml").read_text(encoding="utf-8")) or {}
    base = str((data.get("index") or {}).get("base_url") or "")
    host = base.split("://", 1)[-1].split("/", 1)
    if host[0].endswith(".github.io") and len(host) > 1 and host[1]:
        return f"{host[0].removesuffix('.github.io')}/{host[1].split('/')[0]}"
    return "local/torch-buildtools"


TOKEN = "ci-run-token-not-a-secret"


class FakeGitHub:
    """ci/act/fakegithub.py for the release runs: the REST API and the Pages host."""

    def __init__(
        self, state: Path, repo: Path, repository: str, pages_url: str, server_host: str = ""
    ) -> None:
        """`server_host`: GITHUB_SERVER_URL is https://server_host, served through the proxy
        (else the api listener's own http URL)."""
        host, _, path = pages_url.split("://", 1)[-1].partition("/")
        prefix = "/" + path.split("/")[0] if host.endswith(".github.io") and path else ""
        state.mkdir(parents=True, exist_ok=True)
        (state / "ports.json").unlink(missing_ok=True)
        self.state = state
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "fakegithub.py"),
                "--state",
                str(state),
                "--repo-dir",
                str(repo),
                "--repository",
                repository,
                "--token",
                TOKEN,
                "--pages-host",
                host,
                "--pages-prefix",
                prefix,
                "--server-host",
                server_host,
            ],
            start_new_session=True,
        )
        for _ in range(600):
            if (state / "ports.json").is_file():
                break
            if self.proc.poll() is not None:
                raise SystemExit("ci-run: the fake GitHub server did not start")
            time.sleep(0.1)
        self.ports = json.loads((state / "ports.json").read_text())
        self.server_url = f"https://{server_host}" if server_host else self.ports["api"]

    def env(self) -> dict[str, str]:
        return {
            "GITHUB_API_URL": self.ports["api"],
            # actions/checkout fetches a `ref:` from here; wheels link to its releases
            "GITHUB_SERVER_URL": self.server_url,
            # git and curl trust the run's CA too (an https server URL through the proxy)
            "GIT_SSL_CAINFO": self.ports["ca_bundle"],
            "CURL_CA_BUNDLE": self.ports["ca_bundle"],
            "https_proxy": self.ports["proxy"],
            "HTTPS_PROXY": self.ports["proxy"],
            "SSL_CERT_FILE": self.ports["ca_bundle"],
            "BT_ACT_PAGES_DIR": str(self.state / "pages"),
            # the repository's attestations outlive the run that made them, as GitHub's
            # do: a later run (backfill.yml, the next release) verifies the record with them
            "BT_ACT_ATTESTATIONS": str(self.state / "attestations.jsonl"),
        }

    def requests(self) -> list[dict[str, object]]:
        log_file = self.state / "requests.jsonl"
        if not log_file.is_file():
            return []
        return [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()]

    def dispatches(self) -> list[dict[str, Any]]:
        """The workflow dispatches the runs asked for (`gh workflow run`), in order."""
        log_file = self.state / "dispatches.jsonl"
        if not log_file.is_file():
            return []
        return [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()]

    def uploads(self) -> list[dict[str, object]]:
        return [r for r in self.requests() if str(r.get("path", "")).startswith("/uploads")]

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)
