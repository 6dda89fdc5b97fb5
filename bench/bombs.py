"""What a zip bomb costs `buildtools check` and `buildtools index`: peak memory and disk.

Makes the bombs of the second hostile probe (issue 24) at full size, then runs each verb on
each in a child process under `/usr/bin/time -v` (peak RSS) while sampling, every 10 ms,
the space used on the file system of `--scratch` (the child's TMPDIR and the site it
publishes to; give it a file system of its own, a small tmpfs, for exact figures: a
temporary file that is unlinked at once is seen only there):

    python bench/bombs.py --scratch /mnt/scratch           # every bomb, both verbs
    python bench/bombs.py --scratch /mnt/scratch --json bench/bombs.json

- metadata-2.2g: a ~2 MB wheel whose METADATA inflates to 2.2 GB;
- so-2.2g: a ~2 MB wheel whose `_C.so` inflates to 2.2 GB;
- hip-2.2g: a wheel whose `_C.so` (stored) holds a compressed HIP offload bundle that
  inflates to 2.2 GB (the bundle's header sits in its first bytes);
- hip-2.2g-deflated: the same `_C.so` deflated, as the probe's 4.9 KB wheel had it;
- overlap: 5,000 directory entries over one deflated kernel (a non-recursive bomb);
- so-random-256m: not a bomb: a 256 MB `_C.so` of random bytes (what a large real
  library costs: it is streamed to one temporary file).

Run it with the Python of the buildtools to measure (a venv of main, of a branch): the
CLI is `sys.executable -m buildtools`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fixtures.crafted import (  # noqa: E402
    make_site_packages,
    make_so,
    offload_bundle,
)
from fixtures.hostile import Member, wheel_members, zip_bytes  # noqa: E402

TAG = "cp312-cp312-manylinux_2_28_x86_64"
NAME = f"hostile-1.0+pt213cpu-{TAG}.whl"
GB22 = 2200 << 20


def _deflate_zeros(prefix: bytes, zeros: int, *, raw: bool) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15 if raw else 15)
    out = [packer.compress(prefix)]
    block = b"\0" * (1 << 24)
    for _ in range(zeros >> 24):
        out.append(packer.compress(block))
    out.append(packer.flush())
    return b"".join(out)


def _member_of_zeros(name: str, prefix: bytes, zeros: int) -> Member:
    """A deflated member of `prefix` + `zeros` zero bytes, compressed once (not in memory)."""
    body = _deflate_zeros(prefix, zeros, raw=True)
    crc = zlib.crc32(prefix)
    block = b"\0" * (1 << 24)
    for _ in range(zeros >> 24):
        crc = zlib.crc32(block, crc)
    return Member(name, method=8, crc=crc, file_size=len(prefix) + zeros, body=body)


def _hip_so(inflated: int) -> bytes:
    head = offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx90a"])
    data = _deflate_zeros(head, inflated, raw=False)
    ccob = b"CCOB" + struct.pack("<HHIIQ", 2, 0, 24 + len(data), len(head) + inflated, 0) + data
    so: bytes = make_so(soname="_C.so", sections={".hip_fatbin": ccob})
    return so


def bombs(directory: Path) -> dict[str, Path]:
    made: dict[str, Path] = {}
    meta = b"Metadata-Version: 2.1\nName: hostile\nVersion: 1.0+pt213cpu\n\n"
    so = make_so(soname="_C.so", needed=["libc10.so"])
    hip = _hip_so(GB22)
    shapes = {
        "metadata-2.2g": wheel_members(
            skip=["METADATA"],
            extra=[_member_of_zeros("hostile-1.0+pt213cpu.dist-info/METADATA", meta, GB22)],
        ),
        "so-2.2g": wheel_members(extra=[_member_of_zeros("hostile/_C.so", so, GB22)]),
        "hip-2.2g": wheel_members(extra=[Member("hostile/_C.so", hip, method=0)]),
        "hip-2.2g-deflated": wheel_members(extra=[Member("hostile/_C.so", hip)]),
        "overlap": wheel_members(
            extra=[_member_of_zeros("hostile/k0.so", so, 1 << 19)]
            + [Member(f"hostile/k{i}.so", b"", offset=0) for i in range(1, 5000)]
        ),
        "so-random-256m": wheel_members(
            extra=[Member("hostile/_C.so", so + os.urandom(256 << 20), method=0)]
        ),
    }
    for slug, members in shapes.items():
        path = directory / slug / NAME
        path.parent.mkdir(parents=True)
        path.write_bytes(zip_bytes(members))
        made[slug] = path
    return made


def _used(root: Path) -> int:
    """Bytes in use on the file system holding `root` (unlinked temporary files included)."""
    st = os.statvfs(root)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _peak_disk(root: Path, stop: threading.Event, peak: list[int]) -> None:
    base = _used(root)
    while not stop.is_set():
        peak[0] = max(peak[0], _used(root) - base)
        stop.wait(0.01)


def measure(argv: list[str], scratch: Path) -> dict[str, object]:
    """Run `buildtools ARGV`: exit code, last stderr line, wall, peak RSS, peak disk."""
    tmp = scratch / "tmp"
    tmp.mkdir()
    stop = threading.Event()
    peak = [0]
    sampler = threading.Thread(target=_peak_disk, args=(scratch, stop, peak))
    sampler.start()
    started = time.monotonic()
    done = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "buildtools", *argv],
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    said = [ln for ln in (done.stdout + done.stderr).splitlines() if "error" in ln.lower()]
    return {
        "exit": done.returncode,
        "line": (said[0] if said else "").strip()[:160],
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(int(rss[1]) / 1024, 1) if rss else None,
        "peak_disk_mb": round(peak[0] / (1 << 20), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default=None, help="a regular expression of bomb names")
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where the children write (own file system)"
    )
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        site = make_site_packages(root / "torch-site")
        made = bombs(root / "bombs")
        for slug, path in made.items():
            if args.only and not re.search(args.only, slug):
                continue
            size = path.stat().st_size
            for verb in ("check", "index"):
                scratch = (args.scratch or root) / f"scratch-{slug}-{verb}"
                scratch.mkdir()
                argv = (
                    ["check", str(path), "--torch", str(site)]
                    if verb == "check"
                    else ["index", str(path), "--no-matrix", "--site", str(scratch / "site")]
                )
                row = {"bomb": slug, "wheel_bytes": size, "verb": verb, **measure(argv, scratch)}
                rows.append(row)
                shutil.rmtree(scratch, ignore_errors=True)
                print(
                    f"| {slug} | {size / (1 << 20):.2f} MB | {verb} | {row['exit']} | "
                    f"{row['peak_rss_mb']} MB | {row['peak_disk_mb']} MB | {row['wall_s']} s | "
                    f"{row['line']} |",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
