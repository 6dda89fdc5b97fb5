#!/usr/bin/env python3
"""Refresh buildtools/data/actions.yaml: the commit SHA of each action's newest release.

    python ci/refresh-action-pins.py               # newest vX.Y.Z of every action, rewrite the file
    python ci/refresh-action-pins.py --same-major  # stay on each pin's major version
    python ci/refresh-action-pins.py --check       # only report stale pins (exit 1 when any)

Tags come from `git ls-remote --tags https://github.com/OWNER/REPO` (annotated tags peeled to
their commit), so a pin is the commit GitHub runs for that tag. After a refresh: read the
release notes of every new major (inputs change), run `nox -s ci` to regenerate the workflows,
`nox -s tests` (actionlint runs on them), and commit the data file with the workflows.
Needs `git` and access to github.com (not run where this was written: the pins there were
read from snapshots of the actions' repositories, see the file's header).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from buildtools.workflows.pins import PINS_PATH, load_pins, parse_ls_remote, stale_pins


def ls_remote(action: str) -> dict[str, str]:
    """tag → commit SHA of github.com/<action>."""
    proc = subprocess.run(
        ["git", "ls-remote", "--tags", f"https://github.com/{action}.git"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if proc.returncode != 0:
        sys.exit(f"git ls-remote {action}: {proc.stderr.strip() or proc.returncode}")
    return parse_ls_remote(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report only; exit 1 when stale")
    parser.add_argument("--same-major", action="store_true", help="newest tag of each pin's major")
    args = parser.parse_args()

    pins = load_pins()
    tags = {action: ls_remote(action) for action in sorted(pins.actions)}
    updates = stale_pins(pins, tags, same_major=args.same_major)
    for u in updates:
        print(f"{u.action}: {u.old_version} -> {u.new_version} ({u.new_sha})")
    if not updates:
        print(f"every pin in {PINS_PATH} is the newest release")
        return 0
    if args.check:
        return 1

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    doc = yaml.load(PINS_PATH.read_text(encoding="utf-8"))
    today = datetime.date.today().isoformat()
    for u in updates:
        entry = doc["actions"][u.action]
        entry["sha"] = u.new_sha
        entry["version"] = u.new_version
        entry["released"] = None  # ls-remote does not say; the tag's commit date if you add it
        entry["source"] = f"git ls-remote --tags https://github.com/{u.action} on {today}"
    with PINS_PATH.open("w", encoding="utf-8") as fh:
        yaml.dump(doc, fh)
    load_pins()  # the file still validates
    print(f"wrote {PINS_PATH}; now run `nox -s ci` and `nox -s tests`, and review the diff")
    return 0


if __name__ == "__main__":
    sys.exit(main())
