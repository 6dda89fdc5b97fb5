"""The release-trust runs of `nox -s ci-run` (docs/ci.md, "The runs, and what each proves"):
what a lower-trust job could plant, and what the release does with it.

- `plant_caches`: before the release run, a newer `ninja` wheel in the runner's default
  prefetch directory and an object in its compiler cache (what a persistent runner, or a
  cache restored from a key a branch re-created, would hold); `check_release_trust` then
  requires the release build to have read neither (its cache directory starts empty and
  the build says so), and the signing job to have run no checkout.
- `bad_base`: the release with the base pinned to a digest the registry does not serve
  (a tag pushed again and the old manifest gone): the images job and the build stop at
  the pull, nothing is published.
- `forged_smoke`: the smoke job, compromised, also uploads a report passing the wheel in
  an artifact of its own: no smoke leg reported that report's digest, so the prepare job
  stops and nothing is signed.
- `check_window_publish`: the smoke-only release of a new torch inside a published
  stable-ABI wheel's window (`backfill-window`, ci/act/window.py): no build, and the wheel
  listed on the new torch's page only on a passing smoke of that torch.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

from harness import FakeGitHub, Outcome, act, capture, log

PLANTED_NINJA = "ninja-99.0.0-py3-none-any.whl"
_IDENT = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]


def _wheel() -> bytes:
    """A valid (empty) ninja 99.0.0 wheel: what an offline install would take if it saw it."""
    dist = "ninja-99.0.0.dist-info"
    files = {
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: ninja\nVersion: 99.0.0\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ci-run\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out.getvalue()


def plant_caches(run_dir: Path) -> None:
    """A newer ninja in the runner's prefetch directory, an object in its compiler cache."""
    cache = run_dir / "home" / ".cache" / "torch-buildtools"
    (cache / "prefetch").mkdir(parents=True)
    (cache / "prefetch" / PLANTED_NINJA).write_bytes(_wheel())
    (cache / "ccache").mkdir(parents=True)
    (cache / "ccache" / "planted.o").write_bytes(b"PLANTED OBJECT\n")
    log(f"release: planted {PLANTED_NINJA} and a compiler object in {cache}")


def check_release_trust(o: Outcome, cell: str) -> None:
    text = o.log_file.read_text(errors="replace")
    build = [line for line in text.splitlines() if line.startswith(f"[release/build {cell}")]
    o.require(
        any("a release build reads no cache" in line for line in build),
        "the release build did not say it reads no cache",
    )
    o.require(not any(PLANTED_NINJA in line for line in build), "the build saw the planted ninja")
    # what the container installed: the build's own log (the build-report artifact)
    installed = {
        m
        for path in (o.run / "artifacts").glob(f"build-report-{cell}/**/*")
        if path.is_file()
        for m in re.findall(r"ninja==[0-9][0-9.]*", path.read_text(errors="replace"))
    }
    o.require(bool(installed), "no ninja install in the build's log")
    o.require("ninja==99.0.0" not in installed, f"the build installed {sorted(installed)}")
    cache = o.run / "home" / ".cache" / "torch-buildtools"
    o.require((cache / "prefetch" / PLANTED_NINJA).is_file(), "the planted ninja is gone")
    o.require(
        (cache / "ccache" / "planted.o").read_bytes() == b"PLANTED OBJECT\n",
        "the planted compiler object was touched",
    )
    signing = [line for line in text.splitlines() if line.startswith("[release/publish the rel")]
    o.require(bool(signing), "no log of the signing job")
    o.require(
        not any("Check out" in line or "actions/checkout" in line for line in signing),
        "the signing job checked something out",
    )
    o.require(
        any(
            "release bundle" in line and "as the prepare job made them" in line for line in signing
        ),
        "the signing job did not check the bundle",
    )


def bad_base(
    work: Path,
    repo: Path,
    lr: list[str],
    payload: dict[str, object],
    env: dict[str, str],
    secret: list[str],
) -> Outcome:
    """The release with the CPU base pinned to a digest the registry does not serve."""
    good = Path(env["BUILDTOOLS_IMAGE_PINS"])
    bad = work / "image_pins-gone.yaml"
    text = good.read_text(encoding="utf-8")
    digest = text.split("digest: '", 1)[1].split("'", 1)[0]
    gone = "sha256:" + hashlib.sha256(b"re-pushed " + digest.encode()).hexdigest()
    bad.write_text(text.replace(digest, gone), encoding="utf-8")
    o = act(
        "bad-base",
        work,
        repo,
        lr,
        event="workflow_dispatch",
        workflow="release.yml",
        payload=payload,
        extra=secret,
        env={**env, "BUILDTOOLS_IMAGE_PINS": str(bad)},
        expect="the pinned base is not served: image and build stop, nothing published",
    )
    log_text = o.log_file.read_text(errors="replace")
    o.require(o.job("image") == "failed", f"image: {o.job('image')}")
    o.require(o.job("build") == "failed", f"build: {o.job('build')}")
    o.require("manifest unknown" in log_text or "not found" in log_text, "no failed pull")
    o.require(o.job("publish the release") == "not run", "publish ran")
    o.require(o.job("status") == "failed", f"status: {o.job('status')}")
    return o


def forged_smoke(
    work: Path,
    repo: Path,
    lr: list[str],
    payload: dict[str, object],
    env: dict[str, str],
    secret: list[str],
) -> Outcome:
    """The smoke job also uploads a report of its own making (a compromised machine)."""
    from ruamel.yaml import YAML

    path = repo / ".github" / "workflows" / "release.yml"
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    data = yaml.load(path.read_text(encoding="utf-8"))
    steps = data["jobs"]["smoke-cpu"]["steps"]
    upload = next(s for s in steps if str(s.get("name", "")).startswith("Upload smoke"))
    steps.append(
        {
            "name": "ci-run: a compromised machine forges a report",
            "if": "always()",
            "run": 'mkdir -p forged && sed \'s/"results"/ "results"/\' '
            "smoke-results/report.json > forged/report.json\n",
        }
    )
    steps.append(
        {
            "name": "ci-run: and uploads it",
            "if": "always()",
            "uses": upload["uses"],
            "with": {"name": "smoke-forged", "path": "forged/"},
        }
    )
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    capture(["git", *_IDENT, "commit", "-q", "-am", "ci-run: a forged smoke report"], cwd=repo)
    try:
        o = act(
            "forged-smoke",
            work,
            repo,
            lr,
            event="workflow_dispatch",
            workflow="release.yml",
            payload=payload,
            extra=secret,
            env=env,
            expect="a report no smoke leg reported: prepare stops, nothing signed",
        )
    finally:
        capture(["git", "reset", "-q", "--hard", "HEAD~1"], cwd=repo)
    text = o.log_file.read_text(errors="replace")
    o.require(o.job("prepare the release") == "failed", f"prepare: {o.job('prepare the rel')}")
    o.require(
        "no smoke leg of this run reported a report with these bytes" in text,
        "the selection did not name the forged report",
    )
    o.require(o.job("publish the release") == "not run", "publish ran")
    o.require(o.job("status") == "failed", f"status: {o.job('status')}")
    return o


def check_window_publish(
    o: Outcome, fake: FakeGitHub, *, cell: str, torch: str, uploads_before: int
) -> None:
    """The smoke-only release of a window cell (`backfill-window`): the gate fails when any
    build or image job ran, or when the published site lists the wheel on `torch`'s page
    without a passing smoke entry of `cell` on that torch from the smoke-only leg; it also
    requires the listing itself (the new torch's page names the published wheel)."""
    text = o.log_file.read_text(errors="replace")
    built = sorted(j for j in o.jobs if j.startswith(("build", "image")))
    o.require(not built, f"a build ran for the window cell: {built}")
    for job in ("plan", "smoke-only", "prepare the release", "publish the release", "status"):
        o.require(o.job(job) == "succeeded", f"job {job!r}: {o.job(job)}")
    o.require("as the published record says" in text, "the smoke-only leg did not check the sha256")
    wheels = sorted((o.run / "artifacts").glob(f"wheels-window-{cell}/*.whl"))
    o.require(len(wheels) == 1, f"wheels-window-{cell}: {[w.name for w in wheels]}")
    name = wheels[0].name if wheels else "?"
    passed = []
    for report in (o.run / "artifacts").glob(f"smoke-window-{cell}/**/report.json"):
        data = json.loads(report.read_text())
        passed += [
            r
            for r in data.get("results", [])
            if r.get("cell") == cell
            and r.get("status") == "passed"
            and str(r.get("torch") or "").split("+")[0] == torch
        ]
    pages = fake.state / "pages"
    listed = sorted(
        str(p.relative_to(pages))
        for p in pages.rglob(f"torch-{torch}*.html")
        if name in p.read_text(errors="replace")
    )
    o.require(bool(listed), f"no page of torch {torch} lists {name}")
    o.require(
        not listed or bool(passed),
        f"{name} is listed on {listed} without a passing smoke of {cell} on torch {torch}",
    )
    asset_uploads = [
        u for u in fake.uploads()[uploads_before:] if name.split("+")[0] in str(u.get("path"))
    ]
    o.require(not asset_uploads, f"the wheel was uploaded again: {asset_uploads}")
    log(f"{cell}: smoke passed on {[r.get('torch') for r in passed]}, listed on {listed}")
