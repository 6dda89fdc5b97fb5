"""The `backfill-window` run of `nox -s ci-run` (docs/ci.md, docs/release-day.md): release
day for a stable-ABI window through the generated workflows, end to end.

1. the snapshot's matrix.yaml becomes the stable-ABI fixture's (tests/fixtures/ext_stable,
   `torch: [">=2.11"]`, cpu, 3.11), the workflows regenerated; a release run publishes its
   one wheel into the fake GitHub's authenticated record, its window resolved against a
   package index that serves torch 2.11.0 and 2.13.0 (`TorchIndex`: PyPI's own torch page,
   fetched once, with the other releases' files left out);
2. a new release inside the window appears: the index now serves 2.12.1 too;
3. act runs backfill.yml, whose dispatch job runs `gh workflow run release.yml … -f window=…`;
   act cannot chain a workflow_dispatch, so the harness starts release.yml with the inputs
   the fake GitHub recorded for that dispatch, as GitHub would;
4. that release run builds nothing: smoke-window-cpu downloads the published wheel from the
   fake GitHub's release asset (https, sha256 checked), smokes it with --window-torch, and
   the publish lists the same wheel on torch 2.12.1's page;
5. `gates.check_window_publish` fails the run when the wheel is listed there without a
   passing smoke entry for that torch, or when any build or image job ran.

The torch environments of the smoke runs: 2.13.0 is installed by the smoke itself (this
machine's local CPU wheel); 2.11.0 and 2.12.1 are seeded into the runs' smoke cache from
environments on this machine (`seed_torch_envs`), each a CUDA build of that release, which
proves a CPU wheel's claim (`torchinstall.window_build_ok`): a hosted runner downloads them
(several GB each), which this machine does not do per run. Listed among the stand-ins.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gates import check_window_publish
from harness import TOKEN, FakeGitHub, Outcome, act, capture, log

FIXTURE = "tests/fixtures/ext_stable"
CELL_PYTHON = "3.11"
RELEASED = ("2.11.0", "2.13.0")  # what the index serves at the first release
NEW = "2.12.1"  # the release that appears inside the published window
PYPI_TORCH = "https://pypi.org/simple/torch/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_IDENT = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]


class TorchIndex:
    """A PEP 691 index serving torch's page as PyPI serves it, less the releases not out yet
    (`BUILDTOOLS_PACKAGE_INDEX`: what the planner resolves a torch range against)."""

    def __init__(self, work: Path) -> None:
        cache = work / "pypi-torch.json"
        if not cache.is_file():
            req = urllib.request.Request(PYPI_TORCH, headers={"Accept": SIMPLE_JSON})
            with urllib.request.urlopen(req, timeout=120) as resp:
                cache.write_bytes(resp.read())
        self.page: dict[str, Any] = json.loads(cache.read_bytes())
        self.versions: tuple[str, ...] = RELEASED
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0].rstrip("/") != "/simple/torch":
                    self.send_error(404)
                    return
                body = json.dumps(index.view()).encode()
                self.send_response(200)
                self.send_header("Content-Type", SIMPLE_JSON)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def view(self) -> dict[str, Any]:
        keep = [f for f in self.page["files"] if f["filename"].split("-")[1] in set(self.versions)]
        return {**self.page, "files": keep}


def stable_matrix(repo: Path, image: str) -> str:
    """The snapshot's matrix.yaml becomes the stable fixture's (index and CPU base kept), the
    workflows regenerated, committed; returns the tag of its version."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096
    old = yaml.load((repo / "matrix.yaml").read_text(encoding="utf-8"))
    data = {
        "version": 1,
        "project": {
            "path": FIXTURE,
            "name": "ext_stable",
            "abi": "stable",
            "smoke": "python smoke.py",
        },
        "axes": {
            "torch": [">=2.11"],
            "accelerator": ["cpu"],
            "python": [CELL_PYTHON],
            "platform": ["linux_x86_64"],
        },
        "accelerators": {"cpu": {"image": image}},
        "runners": {"build": {"cpu": "ubuntu-24.04"}, "smoke": {"cpu": "ubuntu-24.04"}},
        "profiles": {
            "pr": {"description": "the window's cell", "select": [{"accelerator": "cpu"}]},
            "release": {"description": "every cell"},
        },
        "index": dict(old["index"]),
    }
    with (repo / "matrix.yaml").open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    capture([sys.executable, "-m", "buildtools", "ci", "github"], cwd=repo)
    capture(["git", "add", "-A"], cwd=repo)
    capture(["git", *_IDENT, "commit", "-q", "-m", "ci-run: the stable-ABI fixture"], cwd=repo)
    setup = (repo / FIXTURE / "setup.py").read_text(encoding="utf-8")
    version = setup.split('version="', 1)[1].split('"', 1)[0]
    return f"v{version}"


def _torch_env_key(torch: str) -> str:
    """The directory `smoke.envs.index_torch_env` caches a torch-only env under (no
    --torch-index: PyTorch's index of the accelerator)."""
    from buildtools.ecosystem import load_ecosystem

    index = f"{load_ecosystem().pytorch_index}/cpu"
    key = hashlib.sha256(f"{CELL_PYTHON}|{torch}|cpu|{index}".encode()).hexdigest()[:12]
    return f"py{CELL_PYTHON}-torch{torch}-{key}"


def seed_torch_envs(home: Path, envs: dict[str, Path]) -> list[str]:
    """torch release → a venv of this machine with it: each made the cached smoke env of
    that release under the run's HOME (symlinks to its bin/lib, its probed torch as the
    marker), so the smoke reuses it instead of downloading it. Returns the dirs made."""
    from buildtools.cachedir import default_cache_dir
    from buildtools.process import SubprocessRunner
    from buildtools.smoke.smokeenvs import probe_torch

    root = default_cache_dir({"HOME": str(home)}) / "smoke" / "torch"
    root.mkdir(parents=True, exist_ok=True)
    made = []
    for torch, venv in envs.items():
        _, probed = probe_torch(venv / "bin" / "python", SubprocessRunner(), dict(os.environ),
                                devices=False)  # fmt: skip
        if probed is None or not probed.version.startswith(torch):
            raise SystemExit(f"ci-run: {venv}: not a torch {torch} environment ({probed})")
        for name in (torch, f"{torch}+cpu"):  # a window entry's torch carries the build's label
            env = root / _torch_env_key(name)
            env.mkdir()
            (env / "pyvenv.cfg").write_bytes((venv / "pyvenv.cfg").read_bytes())
            for sub in ("bin", "lib", "include"):
                if (venv / sub).exists():
                    (env / sub).symlink_to(venv / sub)
            (env / ".buildtools-ready").write_text(json.dumps(probed.to_json()) + "\n")
            made.append(f"{env.name} -> {venv} ({probed.version})")
    return made


def _event(repository: str, inputs: dict[str, str]) -> dict[str, object]:
    repo = {
        "full_name": repository,
        "name": repository.split("/")[1],
        "owner": {"login": repository.split("/", maxsplit=1)[0]},
        "default_branch": "main",
    }
    return {"inputs": inputs, "ref": "refs/heads/main", "repository": repo}


def backfill_window(
    work: Path,
    repo: Path,
    lr: list[str],
    fake: FakeGitHub,
    envs: dict[str, Path],
    pinned_env: dict[str, str],
    tag: str,
) -> list[Outcome]:
    """The three runs: the release, the backfill, the release the backfill dispatched."""
    from harness import repository_of

    repository = repository_of(repo)
    index = TorchIndex(work)
    env = {**fake.env(), **pinned_env, "BUILDTOOLS_PACKAGE_INDEX": index.url}
    secret = ["-s", f"GITHUB_TOKEN={TOKEN}"]
    seeded: list[str] = []

    def seed(run_dir: Path) -> None:
        seeded[:] = seed_torch_envs(run_dir / "home", envs)
        log("seeded smoke envs: " + "; ".join(seeded))

    outcomes = []
    first = act(
        "window release",
        work,
        repo,
        lr,
        event="workflow_dispatch",
        workflow="release.yml",
        payload=_event(
            repository, {"tag": tag, "only": "", "unsmoked": "false", "publish": "true"}
        ),
        extra=secret,
        env=env,
        before=seed,
        expect=f"the stable wheel published for torch {' and '.join(RELEASED)}",
    )
    for job in ("plan", "build", "smoke", "prepare the release", "publish the release"):
        first.require(first.job(job) == "succeeded", f"job {job!r}: {first.job(job)}")
    outcomes.append(first)
    if first.problems:
        return outcomes
    index.versions = (*RELEASED, NEW)
    log(f"the index now serves torch {NEW} too")
    back = act(
        "backfill-window backfill",
        work,
        repo,
        lr,
        event="workflow_dispatch",
        workflow="backfill.yml",
        payload=_event(repository, {"tag": ""}),
        extra=secret,
        env=env,
        expect=f"dispatches release.yml with window torch{NEW}-cpu-cp{CELL_PYTHON.replace('.', '')}",
    )
    cell = f"torch{NEW}-cpu-cp{CELL_PYTHON.replace('.', '')}"
    dispatched = [d for d in fake.dispatches() if d.get("workflow") == "release.yml"]
    back.require(back.job("what the latest") == "succeeded", f"missing: {back.job('what the')}")
    back.require(back.job("release the missing") == "succeeded", "the dispatch job did not run")
    back.require(len(dispatched) == 1, f"{len(dispatched)} dispatch(es) of release.yml")
    inputs = dict(dispatched[-1].get("inputs") or {}) if dispatched else {}
    back.require(inputs.get("window", "").split() == [cell], f"window input: {inputs}")
    back.require(not inputs.get("only", "").strip(), f"only input: {inputs.get('only')!r}")
    outcomes.append(back)
    if back.problems:
        return outcomes
    uploads = len(fake.uploads())
    third = act(
        "backfill-window",
        work,
        repo,
        lr,
        event="workflow_dispatch",
        workflow="release.yml",
        payload=_event(repository, {str(k): str(v) for k, v in inputs.items()}),
        extra=secret,
        env=env,
        before=seed,
        expect=f"no build; {cell} smoke-tested with the published wheel, listed on its page",
    )
    check_window_publish(third, fake, cell=cell, torch=NEW, uploads_before=uploads)
    outcomes.append(third)
    return outcomes
