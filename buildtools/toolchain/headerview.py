"""Header views: the include directories a unit with line info reads from the cell's
site-packages, copied to one path named by their content, every file dated the same.

A `.cu` unit compiled with line info (`-lineinfo`, `--generate-line-info`) keeps in its device
code the path of every source and header its kernels come from, with each file's mtime and
size (ptxas reads them from the files the PTX names). The Python cells of one torch × CUDA
read torch's headers from their own environments: the same bytes at other paths, installed at
other times, so each cell's object differs from the next in those tables alone. Compiled
against a view instead (`<store>/views/<sha256 of the directory's files>/`, every file's mtime
`VIEW_MTIME`), the unit is the same bytes in every cell, and a cell built alone gives those
bytes too. Standard library only: the device wrapper loads it by path.

A directory over `MAX_BYTES` or `MAX_FILES` gets no view (a `-I` naming a whole
site-packages): the unit is then compiled as it stands, and not reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "VIEW_MTIME",
    "apply",
    "compile_dir",
    "compiler_includes",
    "include_dirs",
    "view_of",
]

VIEW_MTIME = 315532800  # 1980-01-01 00:00 UTC, the zip format's first date
MAX_BYTES = 512 << 20
MAX_FILES = 100_000
_INCLUDE_OPTS = ("-I", "-isystem", "--include-path", "-idirafter")


def include_dirs(words: Sequence[str]) -> list[str]:
    """The directories `words` (a compiler's arguments) name for includes, as spelt."""
    out: list[str] = []
    for i, word in enumerate(words):
        for opt in _INCLUDE_OPTS:
            if word == opt and i + 1 < len(words):
                out.append(words[i + 1])
            elif word.startswith(opt + "=") and opt.startswith("--"):
                out.append(word[len(opt) + 1 :])
            elif word.startswith(opt) and len(word) > len(opt) and not opt.startswith("--"):
                out.append(word[len(opt) :])
    return [d for d in dict.fromkeys(out) if d]


def compile_dir(words: Sequence[str]) -> str | None:
    """The compile's directory when an include directory of `words` is named relative to it
    (part of a line-info unit's key: its object keeps the path that resolves to, and each
    cell compiles in its own build directory); None when every one is absolute."""
    relative = any(not Path(d).is_absolute() for d in include_dirs(words))
    return str(Path.cwd()) if relative else None


def _files(root: str) -> list[tuple[str, os.stat_result]] | None:
    """Every file under `root` (links followed) with its stat, sorted; None when over the
    limits or unreadable."""
    out: list[tuple[str, os.stat_result]] = []
    total = 0
    try:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=_raise):
            dirnames.sort()
            for name in filenames:
                path = os.path.join(dirpath, name)  # noqa: PTH118 (os.walk's strings)
                st = os.stat(path)  # noqa: PTH116
                total += st.st_size
                out.append((os.path.relpath(path, root), st))
                if len(out) > MAX_FILES or total > MAX_BYTES:
                    return None
    except (OSError, RecursionError):
        return None
    return sorted(out, key=lambda item: item[0])


def _raise(exc: OSError) -> None:
    raise exc


def _digest(store: Path, root: str, files: list[tuple[str, os.stat_result]]) -> str:
    """The sha256 of the directory's names and contents, remembered by every file's path,
    size and mtime (as the store remembers a compiler's digest)."""
    listing = [[rel, st.st_size, st.st_mtime_ns] for rel, st in files]
    sig = hashlib.sha256(json.dumps([root, listing]).encode()).hexdigest()
    memo = store / "views" / "memo" / sig
    try:
        known = memo.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{64}", known):
            return known
    except OSError:
        pass
    value = _contents(root, files)
    memo.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=memo.parent)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    Path(tmp).replace(memo)
    return value


def view_of(store: Path, directory: str) -> str | None:
    """The view of `directory` in `store` (made if missing); None when it cannot have one."""
    root = os.path.realpath(directory)
    files = _files(root)
    if not files:
        return None
    try:
        digest = _digest(store, root, files)
        view = store / "views" / digest
        if (view / ".complete").is_file():
            return str(view / "include")
        (store / "views").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}.", dir=store / "views"))
        try:
            shutil.copytree(root, tmp / "include", symlinks=False)
            for dirpath, _, filenames in os.walk(tmp / "include"):
                for name in filenames:
                    os.utime(Path(dirpath, name), (VIEW_MTIME, VIEW_MTIME))
            if _digest_of_copy(tmp / "include") != digest:
                return None  # the directory changed while it was copied: no view
            (tmp / ".complete").write_text(directory + "\n")
            try:
                tmp.rename(view)
            except OSError:  # another cell made it first
                if not (view / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return None
    return str(view / "include")


def _contents(root: str, files: list[tuple[str, os.stat_result]]) -> str:
    """The sha256 of the files' names and contents (each file's own sha256)."""
    digest = hashlib.sha256()
    for rel, _ in files:
        content = hashlib.sha256(Path(root, rel).read_bytes()).hexdigest()
        digest.update(f"{rel}\0{content}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _digest_of_copy(root: Path) -> str | None:
    files = _files(str(root))
    return None if files is None else _contents(str(root), files)


def _replace_prefix(word: str, old: str, new: str) -> str:
    return re.sub(re.escape(old) + r"(?=$|/|[\s,;:\"'])", lambda _: new, word)


def _with_views(
    store: Path, words: Sequence[str], site_packages: str
) -> tuple[dict[str, str], list[str], str | None]:
    """The include directories of `words` inside `site_packages`, each mapped to its view
    (spelt and resolved), and the host compiler's maps of each view to where the build maps
    the directory (`/site-packages/…`); or ({}, [], why) when one cannot have a view."""
    site = os.path.realpath(site_packages)
    mapping: dict[str, str] = {}
    maps: list[str] = []
    for directory in include_dirs(words):
        real = os.path.realpath(directory)
        if not _inside(real, site):
            continue
        view = view_of(store, directory)
        if view is None:
            return {}, [], f"no header view of {directory}"
        for spelt in dict.fromkeys((directory, str(Path(directory).absolute()), real)):
            mapping[spelt] = view
        target = Path("/site-packages", os.path.relpath(real, site)).as_posix()
        maps += ["-Xcompiler", f"-ffile-prefix-map={view}={target}"]
    return mapping, maps, None


def _rewrite(words: Sequence[str], mapping: dict[str, str]) -> list[str]:
    """`words` with each mapped directory (longest first) replaced by its view."""
    out = list(words)
    for old in sorted(mapping, key=len, reverse=True):
        out = [_replace_prefix(w, old, mapping[old]) for w in out]
    return out


def compiler_includes(compiler: str, env: Mapping[str, str]) -> list[str]:
    """The include directories nvcc adds itself (its nvcc.profile's INCLUDES and
    SYSTEM_INCLUDES, as `--dryrun` prints them), as options: ["-I", dir, "-isystem", dir]. A
    CUDA toolkit installed from PyPI sits in each environment's site-packages, and its headers
    (CCCL's cub, thrust, cuda::std) reach a unit from there."""
    try:
        done = subprocess.run(
            [compiler, "--dryrun", "-c", "x.cu", "-o", "x.o"],
            capture_output=True, text=True, timeout=60, check=False, env=dict(env),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    out: list[str] = []
    for line in done.stderr.splitlines():
        name, sep, value = line.removeprefix("#$ ").partition("=")
        if sep and name in ("INCLUDES", "SYSTEM_INCLUDES"):
            try:
                words = shlex.split(value)
            except ValueError:  # not nvcc's own quoting: no directories from this line
                continue
            for i, word in enumerate(words):
                if word == "-isystem" and i + 1 < len(words):
                    out += ["-isystem", os.path.normpath(words[i + 1])]
                elif word.startswith("-I") and len(word) > 2:
                    out += ["-I", os.path.normpath(word[2:])]
    return out


def apply(
    store: Path,
    site_packages: str,
    args: Sequence[str],
    env: Mapping[str, str],
    env_flags: Sequence[str],
    compiler: str | None = None,
) -> tuple[list[str], dict[str, str], int] | str:
    """A compile's arguments and environment (its flag variables `env_flags`) with the site-packages'
    include directories replaced by their views; the compiler's own include directories
    there (`compiler_includes`) named explicitly through views after the
    project's, ahead of nvcc's own; the host compiler told to map each view back; and how many
    views. Or why it cannot be."""
    site = os.path.realpath(site_packages)
    implicit = compiler_includes(compiler, env) if compiler else []
    inside = [
        w for i in range(0, len(implicit) - 1, 2)
        if _inside(os.path.realpath(implicit[i + 1]), site)
        for w in implicit[i : i + 2]
    ]  # fmt: skip
    words = [*args, *(w for n in env_flags for w in shlex.split(env.get(n, ""))), *inside]
    mapping, maps, why = _with_views(store, words, site_packages)
    if why is not None:
        return why
    out_env = dict(env)
    for name in env_flags:
        if env.get(name):
            out_env[name] = shlex.join(_rewrite(shlex.split(env[name]), mapping))
    out = [*_rewrite(args, mapping), *_rewrite(inside, mapping), *maps]
    return out, out_env, len(set(mapping.values()))


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + os.sep)
