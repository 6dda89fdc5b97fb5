#!/usr/bin/env python3
"""Run the generated workflows with act on this machine, offline: `nox -s ci-run`.

    python ci/act-run.py [--target pr|release|gates|all] [--cell ID] [--work DIR]
                         [--mirror SOURCE] [--base-image REF]

What it does (docs/ci.md, "The pipeline run locally"):
  1. snapshots this checkout (tracked and untracked, git-ignored files left out) into
     WORK/repo as a fresh git repository: that is what act checks out for every job;
  2. makes the action cache (ci/act-actions.py: each pinned commit fetched from GitHub, or
     read from a directory of mirrors with --mirror, and checked) and puts the stand-ins
     (ci/act/standins/) where an action cannot run here;
  3. makes the runner: act's host mode (`-P ubuntu-24.04=-self-hosted`) with a tool cache
     of this machine's CPython builds (what setup-python finds on a hosted runner), its own
     HOME, and the builder base: the local base (docker/local-base.sh) pushed to a registry
     on loopback (ci/act/registry.py) and pinned by the digest it got (a release builds
     only FROM a base pinned by digest);
  4. runs the pull-request workflow for one CPU cell of the `pr` profile (act --matrix
     id:CELL), the release workflow for a test tag with a local stand-in for GitHub's
     REST API (ci/act/fakegithub.py), and the release-proof gates with a bad tag and a bad
     record, a base pinned to a digest no longer served, a forged smoke report, and caches
     planted in the runner's HOME (ci/act/gates.py); then prints each run's verdict,
     duration and the steps stood in for.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "act"))

from gates import bad_base, check_release_trust, forged_smoke, plant_caches  # noqa: E402
from harness import (  # noqa: E402
    DEFAULT_CELL,
    DEFAULT_MIRROR,
    STANDINS,
    TOKEN,
    FakeGitHub,
    Outcome,
    act,
    action_cache,
    base_image,
    capture,
    log,
    narrow_pr_profile,
    repository_of,
    run,
    snapshot,
    tool_cache,
)


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


def version_of(repo: Path) -> str:
    for init in sorted((repo / "examples").rglob("__init__.py")):
        for line in init.read_text().splitlines():
            if line.startswith("__version__"):
                return line.split('"')[1]
    raise SystemExit("ci-run: no __version__ in the example")


def release_event(repository: str, tag: str, cell: str) -> dict[str, object]:
    """A workflow_dispatch payload: its inputs are strings, as GitHub sends them (act 0.2.89
    reads a JSON boolean there as false for `inputs.X`: `publish: true` became --no-publish)."""
    repo = {
        "full_name": repository,
        "name": repository.split("/")[1],
        "owner": {"login": repository.split("/", maxsplit=1)[0]},
        "default_branch": "main",
    }
    return {
        "inputs": {"tag": tag, "only": cell, "unsmoked": "false", "publish": "true"},
        "ref": "refs/heads/main",
        "repository": repo,
    }


def stand_in_act_gaps(repo: Path, workflow: str) -> dict[str, int]:
    """Two of GitHub's semantics act 0.2.89 lacks, written into the snapshot's `workflow`.

    - `${{ strategy.job-index }}` is empty under act, so a build job reports its wheels as
      `wheels_` instead of `wheels_<leg>`; the release runs here have one leg per matrix
      (`only:` one cell), whose index on GitHub is 0: that value is written in.
    - a skipped job's outputs are its raw `${{ … }}` templates under act (on GitHub: none),
      so the publish job read `${{` as a wheel of the skipped CUDA build; each
      `toJSON(needs.X.outputs)` becomes `needs.X.result == 'skipped' && '{}' || …`,
      which is what GitHub gives.
    Both are committed in the snapshot and listed as stand-ins; nothing else is changed.
    """
    path = repo / ".github" / "workflows" / workflow
    text = path.read_text(encoding="utf-8")
    counts = {"strategy.job-index": text.count("${{ strategy.job-index }}")}
    text = text.replace("${{ strategy.job-index }}", "'0'")
    pattern = re.compile(r"\$\{\{ toJSON\(needs\.([A-Za-z0-9_-]+)\.outputs\) \}\}")
    text, counts["skipped job outputs"] = pattern.subn(
        lambda m: (
            f"${{{{ needs.{m[1]}.result == 'skipped' && '{{}}' || toJSON(needs.{m[1]}.outputs) }}}}"
        ),
        text,
    )
    path.write_text(text, encoding="utf-8")
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", *ident, "commit", "-q", "-am", f"ci-run: act's gaps in {workflow}"], cwd=repo)
    return counts


def check_bad_record(o: Outcome, fake: FakeGitHub, uploads_before: int, digest: str) -> None:
    """The run stops where the record is authenticated (the plan reads it for
    --published-from-releases, publish restores from it): nothing uploaded, no Pages. The
    refusal must name the altered bytes (`digest`): a run that could not verify even the
    untouched record (as before the fake GitHub kept attestations across runs) also fails."""
    text = o.log_file.read_text(errors="replace")
    stopped = [j for j in ("plan", "publish the release") if o.job(j) == "failed"]
    o.require(bool(stopped), "neither plan nor publish stopped")
    o.require("gh attestation verify failed" in text, "no failed authentication in the log")
    o.require(f"sha256:{digest[:8]}" in text, "the refusal does not name the altered record")
    o.require(len(fake.uploads()) == uploads_before, "an asset was uploaded after the tamper")
    o.require(o.job("deploy to GitHub Pages") == "not run", "pages deployed")
    o.require(o.job("status") == "failed", f"status: {o.job('status')}")


def site_subpath(base_url: str) -> str:
    """Where the site lies in the Pages artifact: the URL's path, less a project site's
    repository (https://OWNER.github.io/REPO/whl: `whl`)."""
    host, _, path = base_url.split("://", 1)[-1].partition("/")
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[1:] if host.endswith(".github.io") and parts else parts)


def compare_index(
    outcome: Outcome,
    work: Path,
    repo: Path,
    tag: str,
    repository: str,
    server: str,
    subpath: str,
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
    # the site lies at its Pages subpath inside the artifact (`whl/` for
    # https://OWNER.github.io/REPO/whl): that directory is compared, what lies beside it
    # is reported
    inner = site / subpath if subpath else site
    theirs = {p.relative_to(inner): p for p in inner.rglob("*") if p.is_file()}
    beside = sorted(
        str(p.relative_to(site)) for p in site.rglob("*") if p.is_file() and inner not in p.parents
    )
    if beside:
        log(f"index: beside the site in the published artifact: {beside}")
    differ = sorted(str(k) for k in set(mine) ^ set(theirs))
    differ += sorted(
        str(k) for k in set(mine) & set(theirs) if mine[k].read_bytes() != theirs[k].read_bytes()
    )
    (work / "index-compare.txt").write_text("\n".join(differ) + "\n")
    outcome.require(not differ, f"published site != `buildtools index` here: {differ[:8]}")
    log(f"index: {len(theirs)} file(s) published, {len(mine)} made here, {len(differ)} differ")


def tamper_record(state: Path) -> tuple[str, str]:
    """A bad record: the last release's index.json changed after it was attested; (its
    release's tag, the altered file's sha256)."""
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
                return str(rel["tag_name"]), asset["sha256"]
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
    print(
        "- the manylinux builder base image: the local base (docker/local-base.sh), pushed "
        "to a registry on loopback (ci/act/registry.py) and pinned by its digest"
    )
    print("- act's gaps in release.yml, GitHub's values written into the snapshot:")
    print("  `strategy.job-index` = 0 (one leg per matrix), a skipped job's outputs = {}")
    print(
        "- backfill-window: a workflow_dispatch from a workflow (backfill.yml's `gh workflow "
        "run`): recorded by the fake GitHub, release.yml then started by the harness with the "
        "recorded inputs; the package index's torch page: PyPI's, less the releases not out "
        "yet (ci/act/window.py); the smoke envs of torch 2.11.0 and 2.12.1: this machine's "
        "venvs (--window-env) seeded into the runs' smoke cache instead of a download"
    )
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


TARGETS = (
    "pr",
    "pr-fail",
    "release",
    "bad-tag",
    "bad-record",
    "bad-base",
    "forged-smoke",
    "backfill-window",
)


def _targets(asked: list[str] | None) -> set[str]:
    """The runs asked for (`all`: every one); bad-record needs the release before it."""
    targets = set(asked or ["all"])
    if "all" in targets:
        # backfill-window needs torch environments of this machine (--window-env)
        targets = set(TARGETS) - {"backfill-window"}
    if "bad-record" in targets:
        targets.add("release")
    return targets


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        action="append",
        choices=[*TARGETS, "all"],
    )
    parser.add_argument("--cell", default=DEFAULT_CELL, help="the pr profile's CPU cell to run")
    parser.add_argument(
        "--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "bt-ci-run"
    )
    parser.add_argument(
        "--mirror",
        default=os.environ.get("BT_ACT_MIRROR", DEFAULT_MIRROR),
        metavar="SOURCE",
        help="where the actions' repositories are: a URL or git directory template with "
        "{owner} and {name} (default: GitHub, $BT_ACT_MIRROR overrides)",
    )
    parser.add_argument("--base-image", help="local image standing in for the manylinux builder")
    parser.add_argument(
        "--window-env",
        action="append",
        default=[],
        metavar="TORCH=VENV",
        help="backfill-window: a venv of this machine with that torch release (2.11.0, 2.12.1), "
        "seeded into the runs' smoke cache instead of a download",
    )
    return parser


def _window(
    args: argparse.Namespace, work: Path, repo: Path, lr: list[str], pinned: dict[str, str]
) -> list[Outcome]:
    """backfill-window (ci/act/window.py): run last, on the snapshot's stable-ABI matrix."""
    from window import backfill_window, stable_matrix

    envs = {}
    for spec in args.window_env:
        torch, _, venv = spec.partition("=")
        envs[torch] = Path(venv)
    missing = {"2.11.0", "2.12.1"} - set(envs)
    if missing:
        raise SystemExit(f"ci-run: backfill-window needs --window-env for {sorted(missing)}")
    before = capture(["git", "rev-parse", "HEAD"], cwd=repo).strip()
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load((repo / "matrix.yaml").read_text()) or {}
    image = str(data["accelerators"]["cpu"]["image"])
    tag = stable_matrix(repo, image)
    stand_in_act_gaps(repo, "release.yml")
    capture(["git", "-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost", "tag", "-f",
             "-a", tag, "-m", f"ci-run {tag}"], cwd=repo)  # fmt: skip
    fake = FakeGitHub(
        work / "github-window",
        repo,
        repository_of(repo),
        str((data.get("index") or {}).get("base_url") or ""),
        server_host="github.com",
    )
    try:
        return backfill_window(work, repo, lr, fake, envs, pinned, tag)
    finally:
        fake.stop()
        capture(["git", "tag", "-d", tag], cwd=repo)
        capture(["git", "reset", "-q", "--hard", before], cwd=repo)


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 (one branch per run, in order)
    args = _parser().parse_args(argv)
    # SIGTERM ends the run like Ctrl-C: the running act (its own process group) is
    # killed with its group, and the fake GitHub is stopped (finally below)
    signal.signal(signal.SIGTERM, _interrupted)
    targets = _targets(args.target)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    repo = snapshot(work)
    repository = repository_of(repo)
    capture(["git", "remote", "set-url", "origin", f"https://github.com/{repository}"], cwd=repo)
    lr = action_cache(work, args.mirror)
    tool_cache(work)
    base, pins, (_registry, server) = base_image(repo, args.cell, args.base_image, work)
    pinned_env = {"BUILDTOOLS_IMAGE_PINS": str(pins)}
    if targets & {"pr", "pr-fail"}:
        log(
            "pr profile narrowed to " + args.cell + ":\n" + narrow_pr_profile(repo, work, args.cell)
        )
    log(f"prepared in {time.monotonic() - started:.0f} s: {repository}, base {base}")
    outcomes: list[Outcome] = []
    missing: list[str] = []  # runs that could not start
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
                env=pinned_env,
            )
            check_pr(o, args.cell)
            outcomes.append(o)
        if targets & {"release", "bad-tag", "bad-base", "forged-smoke"}:
            from ruamel.yaml import YAML

            data = YAML(typ="safe").load((repo / "matrix.yaml").read_text()) or {}
            subpath = site_subpath(str((data.get("index") or {}).get("base_url") or ""))
            fake = FakeGitHub(
                work / "github",
                repo,
                repository,
                str((data.get("index") or {}).get("base_url") or ""),
            )
            tag = f"v{version_of(repo)}"
            before_gaps = capture(["git", "rev-parse", "HEAD"], cwd=repo).strip()
            if targets & {"release", "bad-base", "forged-smoke"}:
                counts = stand_in_act_gaps(repo, "release.yml")
                log(f"release.yml: act's gaps stood in for: {counts}")
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
            env = {**fake.env(), **pinned_env}
            payload = release_event(repository, tag, args.cell)
            if "bad-base" in targets:
                outcomes.append(bad_base(work, repo, lr, payload, env, secret))
            if "forged-smoke" in targets:
                outcomes.append(forged_smoke(work, repo, lr, payload, env, secret))
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
                    before=plant_caches,
                )
                for job in (
                    "plan",
                    "image",
                    f"build {args.cell}",
                    f"smoke {args.cell}",
                    "prepare the release",
                    "publish the release",
                    "deploy to GitHub Pages",
                    "status",
                ):
                    o.require(o.job(job) == "succeeded", f"job {job!r}: {o.job(job)}")
                check_release_trust(o, args.cell)
                compare_index(o, work, repo, tag, repository, fake.ports["api"], subpath)
                outcomes.append(o)
            released = (
                bool(outcomes) and outcomes[-1].name == "release" and not outcomes[-1].problems
            )
            if "bad-record" in targets and not released:
                log("bad-record: not run, the release published no record to alter")
                missing.append("bad-record")
            elif "bad-record" in targets:
                tampered, digest = tamper_record(work / "github")
                uploads_before = len(fake.uploads())
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
                    expect=f"stops: the record of {tampered} is not authenticated",
                )
                check_bad_record(o, fake, uploads_before, digest)
                outcomes.append(o)
            # the pull-request runs see the workflows as generated (their drift check)
            capture(["git", "reset", "-q", "--hard", before_gaps], cwd=repo)
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
                env=pinned_env,
                expect="the build fails; status fails naming it",
            )
            check_pr_failing(o, args.cell)
            outcomes.append(o)
        # last: it commits the stable-ABI fixture's matrix into the snapshot (reset after)
        outcomes += (
            _window(args, work, repo, lr, pinned_env) if "backfill-window" in targets else []
        )
    finally:
        if fake is not None:
            fake.stop()
        server.shutdown()
        subprocess.run(["docker", "rmi", base], capture_output=True, timeout=120, check=False)
    print_summary(outcomes, fake)
    log(f"total {time.monotonic() - started:.0f} s")
    for name in missing:
        print(f"| {name} | — | — | — | — | not run: what it needs failed above |")
    return 0 if outcomes and not missing and all(not o.problems for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
