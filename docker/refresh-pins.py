#!/usr/bin/env python3
"""Refresh docker/pins.yaml: the digest of every builder base the knowledge base names.

    python docker/refresh-pins.py            # ask the registry (needs network access)
    python docker/refresh-pins.py --list     # only (re)write the list; digests kept as they are

Digests come from `docker buildx imagetools inspect IMAGE --format '{{json .Manifest}}'`
(the manifest list's digest: the same on every architecture), or from
`skopeo inspect --raw docker://IMAGE` hashed, whichever tool is present. The docker backend
then builds FROM `IMAGE@sha256:…`, so a re-pushed tag cannot change a build silently.

Not run where no registry is reachable (the machine this was written on): the pins
there are null, and images are used by tag.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import sys
from pathlib import Path

from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from buildtools.knowledge import load_knowledge
from buildtools.runner import SubprocessRunner

PINS = Path(__file__).resolve().parent / "pins.yaml"
HEADER = """\
# Digests of the builder bases named by buildtools/data/images.yaml, one per image the
# knowledge base can produce. Written by docker/refresh-pins.py; `digest: null` means no
# digest was known when it last ran (the image is then used by tag).
"""


def kb_images() -> list[str]:
    """Every base image the knowledge base names for some torch × accelerator × platform."""
    kb = load_knowledge()
    images: set[str] = set()
    for release in kb.torch.values():
        torch = release.patches[-1]
        accels = ["cpu"] + [f"cu{c.replace('.', '')}" for c in release.cuda]
        accels += [f"rocm{r}" for r in release.rocm]
        for platform in ("linux_x86_64", "linux_aarch64"):
            for accel in accels:
                try:
                    images.add(kb.builder_image(torch, accel, platform))
                except (LookupError, ValueError):
                    continue
    return sorted(images)


def digest_of(image: str) -> str | None:
    runner = SubprocessRunner()
    if shutil.which("docker"):
        result = runner.run(
            ["docker", "buildx", "imagetools", "inspect", image, "--format", "{{json .Manifest}}"],
            capture=True,
        )
        if result.ok:
            digest = json.loads(result.output).get("digest")
            return str(digest) if digest else None
    if shutil.which("skopeo"):
        result = runner.run(["skopeo", "inspect", "--raw", f"docker://{image}"], capture=True)
        if result.ok:
            return "sha256:" + hashlib.sha256(result.output.encode()).hexdigest()
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="do not query a registry")
    args = parser.parse_args()
    yaml = YAML()
    old = {}
    if PINS.is_file():
        data = yaml.load(PINS.read_text()) or {}
        old = {row["image"]: row for row in data.get("pins") or []}
    rows = []
    failed = []
    today = datetime.date.today().isoformat()
    for image in kb_images():
        row = {
            "image": image,
            "digest": (old.get(image) or {}).get("digest"),
            "checked": (old.get(image) or {}).get("checked"),
        }
        if not args.list:
            digest = digest_of(image)
            if digest is None:
                failed.append(image)
            else:
                row["digest"], row["checked"] = digest, today
        rows.append(row)
    with PINS.open("w") as fh:
        fh.write(HEADER)
        yaml.dump({"pins": rows}, fh)
    for image in failed:
        print(f"refresh-pins: no digest for {image} (registry unreachable, or no such tag)")
    print(f"refresh-pins: {len(rows)} image(s), {len(failed)} without a new digest -> {PINS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
