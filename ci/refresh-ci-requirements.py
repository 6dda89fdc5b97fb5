#!/usr/bin/env python3
"""Refresh buildtools/data/ci-requirements.txt: nox and build, every dependency, by sha256.

    python ci/refresh-ci-requirements.py                  # the same top-level pins, re-resolved
    python ci/refresh-ci-requirements.py --nox 2026.11.2  # another nox (also set actions.yaml)
    python ci/refresh-ci-requirements.py --check          # exit 1 when the file would change

`pip download` (from https://pypi.org/simple, this machine's pip configuration ignored) resolves
the closure for the CI Python of data/actions.yaml as wheels only, and the sha256 of each
downloaded file is written next to its pin. The generated workflows install the file with
`pip install --require-hashes --no-deps`; after a refresh run `nox -s ci` and commit both.
Every dependency must have a pure-Python wheel (py3-none-any): one hash then serves every
runner; the script refuses a platform wheel rather than pin one platform's file.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from buildtools.ci.pins import REQUIREMENTS_PATH, load_pins, parse_requirements

INDEX = "https://pypi.org/simple"
HEADER = """\
# The tools the generated workflows install before anything else: nox (which runs the
# project's sessions) and build (the optional PyPI sdist), with every dependency, each pinned
# by version and sha256 for the CI Python ({python}, data/actions.yaml). pip installs them with
# --require-hashes --no-deps, so a rebuild months later gets the same bytes.
#
# Written by `python ci/refresh-ci-requirements.py` (pip download from {index}
# of the pure-Python wheels, sha256 of each file); read on {date}.
"""
_WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-.*-none-any\.whl$")


def resolve(top: list[str], python: str) -> dict[str, tuple[str, str]]:
    """name → (version, sha256) of the wheels pip downloads for `top` on `python`."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-cache-dir", "--index-url", INDEX]
        argv += ["--only-binary=:all:", "--python-version", python, "-d", tmp, *top]
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            sys.exit(f"pip download failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        found = {}
        for wheel in sorted(Path(tmp).glob("*.whl")):
            m = _WHEEL_RE.match(wheel.name)
            if m is None:
                sys.exit(
                    f"{wheel.name}: not a pure-Python wheel; one hash cannot serve every runner"
                )
            name = m["name"].lower().replace("_", "-")
            found[name] = (m["version"], hashlib.sha256(wheel.read_bytes()).hexdigest())
        return found


def render(pins: dict[str, tuple[str, str]], python: str) -> str:
    lines = [HEADER.format(python=python, index=INDEX, date=datetime.date.today().isoformat())]
    for name in sorted(pins):
        version, sha = pins[name]
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{sha}\n")
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nox", help="the nox version (default: data/actions.yaml python.nox)")
    parser.add_argument("--build", help="the build version (default: the current pin)")
    parser.add_argument("--check", action="store_true", help="report only; exit 1 on a change")
    args = parser.parse_args()
    pins = load_pins()
    current = parse_requirements(REQUIREMENTS_PATH.read_text(encoding="utf-8"))
    nox = args.nox or pins.python.nox
    build = args.build or current["build"][0]
    resolved = resolve([f"nox=={nox}", f"build=={build}"], pins.python.version)
    changed = {n: v for n, v in resolved.items() if current.get(n) != v}
    removed = sorted(set(current) - set(resolved))
    for name, (version, _) in sorted(changed.items()):
        print(f"{name}: {current.get(name, ('(new)', ''))[0]} -> {version}")
    for name in removed:
        print(f"{name}: removed")
    if not changed and not removed:
        print(f"{REQUIREMENTS_PATH}: current")
        return 0
    if args.check:
        return 1
    REQUIREMENTS_PATH.write_text(render(resolved, pins.python.version), encoding="utf-8")
    if nox != pins.python.nox:
        print(f"set python.nox: {nox!r} in data/actions.yaml too")
    print(f"wrote {REQUIREMENTS_PATH}; run `nox -s ci` and commit both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
