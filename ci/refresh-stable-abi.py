#!/usr/bin/env python3
"""Refresh buildtools/data/stable_abi.json: the LibTorch stable ABI's C shims per torch release.

    python ci/refresh-stable-abi.py            # every release from 2.10.0 the index serves
    python ci/refresh-stable-abi.py --check    # only compare (exit 1 when the file differs)

For each final torch release from `--since` on, one Linux x86_64 wheel (cp312, the highest
build tag, as pip would pick) is read from the package index by HTTP range requests, never
downloaded whole: its central directory, the stable C headers and the inline stable headers
(kilobytes each: which shims exist, behind which TORCH_FEATURE_VERSION guard, which the
inline C++ calls), and `libtorch_cpu.so` and `libtorch_cuda.so`, streamed through an
inflater into a temporary file whose dynamic symbol table is read and which is deleted at
once (118 MB and 332 MB compressed for 2.13.0: never more than one on disk). The result is
validated by loading it, as every command that reads it does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from packaging.version import Version

from buildtools.errors import BuildtoolsError
from buildtools.http import UrllibHttp
from buildtools.knowledge.shimheaders import (
    VERSION_HEADER,
    abi_version,
    calls,
    declarations,
    is_inline_header,
    is_shim_header,
)
from buildtools.knowledge.stableabi import (
    STABLE_ABI_PATH,
    FactsLibrary,
    FactsRelease,
    ReleaseInput,
    dump_facts,
    load_stable_abi,
    merge,
    shim_like,
)
from buildtools.torchindex.indexcache import IndexReader
from buildtools.torchindex.members import Member, extract, listing, read_small
from buildtools.torchindex.simple import IndexFile
from buildtools.wheel.elf import inspect_elf_file

INDEX = "https://pypi.org/simple"
PYTHON_TAG = "cp312"
PLATFORM = "manylinux_2_28_x86_64"
LIBRARIES = ("torch/lib/libtorch_cpu.so", "torch/lib/libtorch_cuda.so")
INCLUDE = "torch/include/"
MAX_HEADER = 4 << 20
MAX_LIBRARY = 4 << 30
CHUNK = 32 << 20
ABOUT = (
    "The C shims of the LibTorch stable ABI per torch release (linux_x86_64): each exported "
    "by the release's libtorch_cpu.so or libtorch_cuda.so and declared by one of its stable "
    "C headers. since/until: the first/last release of these facts that has it; guard: the "
    "TORCH_FEATURE_VERSION its declaration needs; inline: the first release whose inline "
    "stable C++ calls it. Written by ci/refresh-stable-abi.py; do not edit by hand."
)
SOURCE = "V2 (docs/sources.md): the wheels named in releases, read by HTTP range requests"


def pick_wheel(files: Sequence[IndexFile]) -> IndexFile | None:
    """The cp312 x86_64 wheel of a release, the highest build tag first (pip's choice)."""
    fits = [
        f
        for f in files
        if any(t.interpreter == PYTHON_TAG and t.platform == PLATFORM for t in f.tags)
    ]
    return max(fits, key=lambda f: f.build, default=None)


def read_release(http: UrllibHttp, wheel: IndexFile, scratch: Path) -> ReleaseInput:
    started = time.monotonic()
    members = {m.name: m for m in listing(wheel, http)}
    declared = {}
    inline: set[str] = set()
    version_text = None
    for name, member in sorted(members.items()):
        if not name.startswith(INCLUDE):
            continue
        header = name.removeprefix(INCLUDE)
        shim, inline_header = is_shim_header(header), is_inline_header(header)
        if not (shim or inline_header):
            continue
        text = read_small(wheel, http, member, max_size=MAX_HEADER).decode("utf-8", "replace")
        if shim:
            declared[header] = declarations(text)
        if inline_header:
            inline |= calls(text)
        if header == VERSION_HEADER:
            version_text = text
    exports: dict[str, frozenset[str]] = {}
    libraries = []
    names = {n for decls in declared.values() for n in decls}
    for path in LIBRARIES:
        library = members.get(path)
        if library is None:
            continue
        exported = _exports(http, wheel, library, scratch)
        lib = path.rsplit("/", 1)[1]
        exports[lib] = exported
        libraries.append(
            FactsLibrary(
                member=path,
                size=library.size,
                crc32=f"{library.crc:08x}",
                exports=len(exported),
                shims=len(exported & names),
            )
        )
    undeclared = sorted(n for e in exports.values() for n in e if shim_like(n) and n not in names)
    print(
        f"{wheel.filename}: {len(declared)} shim headers, {len(names)} shims declared, "
        + ", ".join(
            f"{lib.member.rsplit('/', 1)[1]} {lib.shims} of {lib.exports}" for lib in libraries
        )
        + f"; {len(undeclared)} shim-like exports no stable header declares"
        + f" ({time.monotonic() - started:.0f} s)",
        flush=True,
    )
    release = FactsRelease(
        version=str(wheel.version),
        wheel=wheel.filename,
        url=wheel.url,
        sha256=wheel.sha256,
        abi_version=abi_version(version_text) if version_text else None,
        libraries=tuple(libraries),
        declared=len(names),
    )
    return ReleaseInput(
        release=release, declared=declared, inline_calls=frozenset(inline), exports=exports
    )


def _exports(http: UrllibHttp, wheel: IndexFile, member: Member, scratch: Path) -> frozenset[str]:
    """The dynamic exports of one library member, inflated into `scratch` and deleted."""
    with tempfile.NamedTemporaryFile(dir=scratch, suffix=".so") as fh:
        extract(wheel, http, member, fh, max_size=MAX_LIBRARY, chunk=CHUNK)
        fh.flush()
        info = inspect_elf_file(fh, path=Path(member.name), size=member.size)
    return info.exported


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", default=INDEX, help=f"the package index (default {INDEX})")
    parser.add_argument("--since", default="2.10.0", help="the oldest release (default 2.10.0)")
    parser.add_argument("--out", type=Path, default=STABLE_ABI_PATH, help="the file written")
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a change")
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where a library is inflated (default: $TMPDIR)"
    )
    args = parser.parse_args()

    http = UrllibHttp(timeout=600)
    reader = IndexReader(http, index_url=args.index, cache_dir=None)
    page = reader.page("torch").page
    inputs = []
    with tempfile.TemporaryDirectory(prefix="stable-abi-", dir=args.scratch) as tmp:
        for version, files in page.releases().items():
            if version < Version(args.since):
                continue
            wheel = pick_wheel(files)
            if wheel is None:
                print(f"torch {version}: no {PYTHON_TAG} {PLATFORM} wheel; skipped")
                continue
            inputs.append(read_release(http, wheel, Path(tmp)))
    document = merge(inputs, about=ABOUT, source=SOURCE, platform="linux_x86_64")
    text = dump_facts(document)
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the index'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    facts = load_stable_abi(args.out)
    print(f"wrote {args.out}: {len(facts.symbols)} shims, releases {', '.join(facts.versions)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BuildtoolsError as exc:
        sys.stderr.write(f"refresh-stable-abi: {exc}\n")
        sys.exit(int(exc.exit_code))
