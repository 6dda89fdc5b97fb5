#!/usr/bin/env python3
"""Run the generated workflows with act on this machine, offline: `nox -s ci-run`.

    python ci/act-run.py [--target pr|release|gates|all] [--cell ID] [--work DIR]
                         [--mirror SOURCE] [--base-image REF]

What it does (docs/ci.md, "The pipeline run locally"):
  1. snapshots this checkout (tracked and untracked, git-ignored files left out) into
     WORK/repo as a fresh git repository: that is what act checks out for every job;
  2. makes the action cache from the mirrors (ci/act-actions.py: each pinned commit
     checked) and puts the stand-ins (ci/act/standins/) where an action cannot run here;
  3. makes the runner: act's host mode (`-P ubuntu-24.04=-self-hosted`) with a tool cache
     of this machine's CPython builds (what setup-python finds on a hosted runner), its own
     HOME, and the builder base image the workflows name (the manylinux builder, which no
     registry serves here) tagged from the local base (docker/local-base.sh);
  4. runs the pull-request workflow for one CPU cell of the `pr` profile (act --matrix
     id:CELL), the release workflow for a test tag with a local stand-in for GitHub's
     REST API (ci/act/fakegithub.py), and the release-proof gates with a bad tag and a bad
     record; then prints each run's verdict, duration and the steps stood in for.

Exit 0 when every run ended as expected (a gate run is expected to fail at its gate).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "ci" / "act"
DEFAULT_MIRROR = "/work/.mirror/{owner}+{name}/repo"
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
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log(f"{argv[0]}: killed after {timeout:.0f} s")
            return 124
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


def base_image(repo: Path, cell: str, given: str | None, work: Path) -> tuple[str, bool]:
    """Tag the local base as the builder base the workflows name for `cell`.

    No registry serves the manylinux builders here; docker/local-base.sh makes a
    "manylinux-like" Debian image instead. Tagged with the builder's name in the local
    engine, `docker build FROM <builder>` finds it without pulling (what a registry mirror
    would do). Returns (the name, whether this run created the tag: removed at the end).
    """
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
    name = str(entry["recipe"]).split("|", 1)[1]
    if "@" in name:
        raise SystemExit(
            f"ci-run: {name}: pinned by digest in docker/pins.yaml; a local image "
            "cannot stand in for it (run with the digest removed)"
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
    exists = (
        subprocess.run(
            ["docker", "image", "inspect", name], capture_output=True, timeout=60, check=False
        ).returncode
        == 0
    )
    capture(["docker", "tag", local, name])
    return name, not exists


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
) -> Outcome:
    run_dir = work / "runs" / name.replace(" ", "-")
    shutil.rmtree(run_dir, ignore_errors=True)
    for sub in ("home", "artifacts"):
        (run_dir / sub).mkdir(parents=True)
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


def pr_event(repository: str) -> dict[str, object]:
    repo = {
        "full_name": repository,
        "name": repository.split("/")[1],
        "owner": {"login": repository.split("/", maxsplit=1)[0]},
        "default_branch": "main",
    }
    return {
        "pull_request": {
            "number": 7,
            "head": {"ref": "ci-run", "repo": repo},
            "base": {"ref": "main", "repo": repo},
        },
        "repository": repo,
    }


def artifact_files(outcome: Outcome, name: str, pattern: str = "*") -> list[Path]:
    return sorted((outcome.run / "artifacts" / name).rglob(pattern))


def check_pr(outcome: Outcome, cell: str) -> None:
    for job in (
        "workflows match matrix.yaml",
        "plan",
        f"build {cell}",
        f"smoke {cell}",
        "index preview",
        "status",
    ):
        outcome.require(outcome.job(job) == "succeeded", f"job {job!r}: {outcome.job(job)}")
    outcome.require(bool(artifact_files(outcome, f"wheels-{cell}", "*.whl")), "no wheel artifact")
    outcome.require(
        bool(artifact_files(outcome, f"smoke-{cell}", "report.json")), "no smoke report"
    )
    outcome.require(bool(artifact_files(outcome, "site-preview", "index.json")), "no site preview")


def check_pr_failing(outcome: Outcome, cell: str) -> None:
    build = outcome.job(f"build {cell}")
    outcome.require(build == "failed", f"build: {build}")
    outcome.require(outcome.job("status") == "failed", f"status: {outcome.job('status')}")
    outcome.require(outcome.job("index preview") == "not run", "the index preview ran")
    text = outcome.log_file.read_text(errors="replace")
    outcome.require(
        cell in text.split("Summary: published, held back, failed")[-1],
        "the status summary does not name the failed cell",
    )


def break_source(repo: Path) -> None:
    """A pull request that breaks the build: one C++ source no longer compiles."""
    sources = sorted((repo / "examples").rglob("*.cpp"))
    if not sources:
        raise SystemExit("ci-run: no C++ source under examples/ to break")
    with sources[0].open("a", encoding="utf-8") as fh:
        fh.write("\n#error ci-run: this pull request breaks the build\n")
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", *ident, "commit", "-q", "-am", "ci-run: break the build"], cwd=repo)


class FakeGitHub:
    """ci/act/fakegithub.py for the release runs: the REST API and the Pages host."""

    def __init__(self, state: Path, repo: Path, repository: str, pages_url: str) -> None:
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

    def env(self) -> dict[str, str]:
        return {
            "GITHUB_API_URL": self.ports["api"],
            # actions/checkout fetches a `ref:` from here; wheels link to its releases
            "GITHUB_SERVER_URL": self.ports["api"],
            "https_proxy": self.ports["proxy"],
            "HTTPS_PROXY": self.ports["proxy"],
            "SSL_CERT_FILE": self.ports["ca_bundle"],
            "BT_ACT_PAGES_DIR": str(self.state / "pages"),
        }

    def requests(self) -> list[dict[str, object]]:
        log_file = self.state / "requests.jsonl"
        if not log_file.is_file():
            return []
        return [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()]

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


def version_of(repo: Path) -> str:
    for init in sorted((repo / "examples").rglob("__init__.py")):
        for line in init.read_text().splitlines():
            if line.startswith("__version__"):
                return line.split('"')[1]
    raise SystemExit("ci-run: no __version__ in the example")


def release_event(repository: str, tag: str, cell: str) -> dict[str, object]:
    repo = {
        "full_name": repository,
        "name": repository.split("/")[1],
        "owner": {"login": repository.split("/", maxsplit=1)[0]},
        "default_branch": "main",
    }
    return {
        "inputs": {"tag": tag, "only": cell, "unsmoked": False, "publish": True},
        "ref": "refs/heads/main",
        "repository": repo,
    }


def compare_index(
    outcome: Outcome, work: Path, repo: Path, tag: str, repository: str, server: str
) -> None:
    """The site the run published against `buildtools index` on the same wheels, here."""
    site = outcome.run / "artifacts" / "site"
    wheels = sorted((outcome.run / "artifacts").glob("wheels-*/*.whl"))
    reports = sorted((outcome.run / "artifacts").glob("smoke-*/**/report.json"))
    local = work / "index-local"
    shutil.rmtree(local, ignore_errors=True)
    selected = local / "selected"
    selected.mkdir(parents=True)
    for wheel in wheels:
        shutil.copy2(wheel, selected / wheel.name)
    argv = [
        sys.executable,
        "-m",
        "buildtools",
        "index",
        str(selected),
        "--site",
        str(local / "site"),
        "--wheel-url",
        f"{server}/{repository}/releases/download/{tag}/{{filename}}",
    ]
    for report in reports:
        argv += ["--require-smoke", str(report)]
    rc = run(argv, cwd=repo, timeout=600, out=local / "index.log")
    outcome.require(rc == 0, f"buildtools index here: exit {rc} ({local / 'index.log'})")
    outcome.require(site.is_dir(), "no `site` artifact")
    if rc != 0 or not site.is_dir():
        return
    mine = {p.relative_to(local / "site"): p for p in (local / "site").rglob("*") if p.is_file()}
    theirs = {p.relative_to(site): p for p in site.rglob("*") if p.is_file()}
    differ = sorted(str(k) for k in set(mine) ^ set(theirs))
    differ += sorted(
        str(k) for k in set(mine) & set(theirs) if mine[k].read_bytes() != theirs[k].read_bytes()
    )
    (work / "index-compare.txt").write_text("\n".join(differ) + "\n")
    outcome.require(not differ, f"published site != `buildtools index` here: {differ[:8]}")
    log(f"index: {len(theirs)} file(s) published, {len(mine)} made here, {len(differ)} differ")


def tamper_record(state: Path) -> str:
    """A bad record: the last release's index.json changed after it was attested."""
    data = json.loads((state / "releases.json").read_text())
    for rel in reversed(data["releases"]):
        for asset in rel["assets"]:
            if asset["name"] == "index.json":
                path = state / "assets" / str(asset["id"])
                body = path.read_bytes().rstrip() + b"\n\n"  # same JSON, other bytes
                path.write_bytes(body)
                asset["size"] = len(body)
                asset["sha256"] = hashlib.sha256(body).hexdigest()
                (state / "releases.json").write_text(json.dumps(data, indent=1))
                return str(rel["tag_name"])
    raise SystemExit("ci-run: no published record to tamper with (run the release first)")


def print_summary(outcomes: list[Outcome], fake: FakeGitHub | None) -> None:
    print("\n## ci-run\n")
    print("| run | expected | exit | duration | jobs | verdict |")
    print("|---|---|---|---|---|---|")
    for o in outcomes:
        jobs = ", ".join(f"{k}: {v}" for k, v in o.jobs.items())
        verdict = "ok" if not o.problems else "; ".join(o.problems)
        print(f"| {o.name} | {o.expect} | {o.rc} | {o.seconds:.0f} s | {jobs} | {verdict} |")
    print("\n### Stood in for\n")
    print("- actions/checkout: act copies the run's repository into each job (no fetch)")
    for name, why in STANDINS.items():
        print(f"- {name}: {why} (ci/act/standins/)")
    print("- gh (api, attestation verify): no GitHub CLI here (ci/act/bin/gh)")
    print("- GitHub's REST API and the Pages host: ci/act/fakegithub.py")
    print("- the manylinux builder base image: the local base (docker/local-base.sh)")
    print("\n### Stand-in calls per run\n")
    for o in outcomes:
        seen: dict[str, int] = {}
        for line in (o.run / "standins.jsonl").read_text().splitlines():
            entry = json.loads(line)
            key = entry["action"] + (f" {entry['verb']}" if "verb" in entry else "")
            seen[key] = seen.get(key, 0) + 1
        print(f"- {o.name}: " + ", ".join(f"{k} x{v}" for k, v in seen.items()))
    if fake is not None:
        calls: dict[str, int] = {}
        for r in fake.requests():
            where = str(r.get("path") or r.get("pages")).split("?")[0]
            key = f"{r.get('method')} {where} -> {r.get('status')}"
            calls[key] = calls.get(key, 0) + 1
        print("\n### What would have been sent to GitHub (all release runs)\n")
        for key, count in calls.items():
            print(f"- {key} (x{count})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        action="append",
        choices=["pr", "pr-fail", "release", "bad-tag", "bad-record", "all"],
    )
    parser.add_argument("--cell", default=DEFAULT_CELL, help="the pr profile's CPU cell to run")
    parser.add_argument(
        "--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "bt-ci-run"
    )
    parser.add_argument("--mirror", default=os.environ.get("BT_ACT_MIRROR", DEFAULT_MIRROR))
    parser.add_argument("--base-image", help="local image standing in for the manylinux builder")
    args = parser.parse_args(argv)
    targets = set(args.target or ["all"])
    if "all" in targets:
        targets = {"pr", "pr-fail", "release", "bad-tag", "bad-record"}
    if "bad-record" in targets:
        targets.add("release")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    repo = snapshot(work)
    repository = repository_of(repo)
    capture(["git", "remote", "set-url", "origin", f"https://github.com/{repository}"], cwd=repo)
    lr = action_cache(work, args.mirror)
    tool_cache(work)
    base, created = base_image(repo, args.cell, args.base_image, work)
    if targets & {"pr", "pr-fail"}:
        log(
            "pr profile narrowed to " + args.cell + ":\n" + narrow_pr_profile(repo, work, args.cell)
        )
    log(f"prepared in {time.monotonic() - started:.0f} s: {repository}, base {base}")
    outcomes: list[Outcome] = []
    fake: FakeGitHub | None = None
    secret = ["-s", f"GITHUB_TOKEN={TOKEN}"]
    try:
        if "pr" in targets:
            o = act(
                "pr",
                work,
                repo,
                lr,
                event="pull_request",
                workflow="pull-request.yml",
                payload=pr_event(repository),
                extra=secret,
            )
            check_pr(o, args.cell)
            outcomes.append(o)
        if targets & {"release", "bad-tag"}:
            from ruamel.yaml import YAML

            data = YAML(typ="safe").load((repo / "matrix.yaml").read_text()) or {}
            fake = FakeGitHub(
                work / "github",
                repo,
                repository,
                str((data.get("index") or {}).get("base_url") or ""),
            )
            tag = f"v{version_of(repo)}"
            capture(
                [
                    "git",
                    "-c",
                    "user.name=ci-run",
                    "-c",
                    "user.email=ci-run@localhost",
                    "tag",
                    "-f",
                    "-a",
                    tag,
                    "-m",
                    f"ci-run {tag}",
                ],
                cwd=repo,
            )
            env = fake.env()
            if "bad-tag" in targets:
                for bad in ("release-1", "v99.0.0"):
                    o = act(
                        f"bad-tag {bad}",
                        work,
                        repo,
                        lr,
                        event="workflow_dispatch",
                        workflow="release.yml",
                        payload=release_event(repository, bad, args.cell),
                        extra=secret,
                        env=env,
                        expect="plan stops at the tag vetting",
                    )
                    text = o.log_file.read_text(errors="replace")
                    o.require(o.job("plan") == "failed", f"plan: {o.job('plan')}")
                    o.require(o.job("build") == "not run", "a build ran")
                    o.require(
                        "is not a release tag" in text or "does not exist" in text,
                        "no vetting message",
                    )
                    outcomes.append(o)
            if "release" in targets:
                o = act(
                    "release",
                    work,
                    repo,
                    lr,
                    event="workflow_dispatch",
                    workflow="release.yml",
                    payload=release_event(repository, tag, args.cell),
                    extra=secret,
                    env=env,
                )
                for job in (
                    "plan",
                    "image",
                    f"build {args.cell}",
                    f"smoke {args.cell}",
                    "publish the release",
                    "deploy to GitHub Pages",
                    "status",
                ):
                    o.require(o.job(job) == "succeeded", f"job {job!r}: {o.job(job)}")
                compare_index(o, work, repo, tag, repository, fake.ports["api"])
                outcomes.append(o)
            if "bad-record" in targets:
                tampered = tamper_record(work / "github")
                o = act(
                    "bad-record",
                    work,
                    repo,
                    lr,
                    event="workflow_dispatch",
                    workflow="release.yml",
                    payload=release_event(repository, tag, args.cell),
                    extra=secret,
                    env=env,
                    expect=f"publish stops: the record of {tampered} is not authenticated",
                )
                o.require(
                    o.job("publish the release") == "failed",
                    f"publish: {o.job('publish the release')}",
                )
                o.require(o.job("deploy to GitHub Pages") == "not run", "pages deployed")
                o.require(o.job("status") == "failed", f"status: {o.job('status')}")
                outcomes.append(o)
        if "pr-fail" in targets:
            break_source(repo)
            o = act(
                "pr-fail",
                work,
                repo,
                lr,
                event="pull_request",
                workflow="pull-request.yml",
                payload=pr_event(repository),
                extra=secret,
                expect="the build fails; status fails naming it",
            )
            check_pr_failing(o, args.cell)
            outcomes.append(o)
    finally:
        if fake is not None:
            fake.stop()
        if created:
            subprocess.run(["docker", "rmi", base], capture_output=True, timeout=120, check=False)
    print_summary(outcomes, fake)
    log(f"total {time.monotonic() - started:.0f} s")
    return 0 if outcomes and all(not o.problems for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
