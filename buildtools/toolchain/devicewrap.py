"""The wrapper in front of nvcc: the matrix's archs are the archs built, and a device unit is
compiled once for every Python (docs/matrix.md `arch_flags`, docs/performance.md).

torch's ninja build calls it as nvcc (`PYTORCH_NVCC`): a script run by path, standard library
only (`python -I devicewrap.py CONFIG ARGS…`). CONFIG (`WrapConfig`) names the command the
compile goes to (a compiler cache's or a cluster's launcher, or nvcc), the cell's arch flags
under `arch_flags: enforce` (the project's `-gencode`/`-arch`/`-code` replaced, in arguments
and NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS), the unit store, and the log it appends one JSON
line to per call (read into the job log, the record and the report).

**Compile once for every Python.** The Python cells of one torch × CUDA compile the same `.cu`
files at other paths, which the build maps out of the objects (`-ffile-prefix-map`). The key
is ccache's depend mode with those paths as placeholders: the compilers' contents, the
arguments and nvcc's environment flags (output paths and speed-only options left out), the
source, and per stored variant every header of the dependency file with its sha256, which
must match at this cell's paths. A unit with line info (paths and mtimes in its device code)
compiles against header views (`toolchain.headerview`), its headers' mtimes matched too. Not
stored: a unit that includes a Python header, one with debug info, or no dependency file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DOWNSTREAM_VAR",
    "SCHEMA",
    "WrapConfig",
    "parse_depfile",
    "unit_key",
]

SCHEMA = 1
# a launcher set after the wrapper's config was written (a --distribute job's): the command
# the compile goes to instead of the config's `downstream`
DOWNSTREAM_VAR = "BUILDTOOLS_NVCC_DOWNSTREAM"
# options whose value is where the compile writes, or what only changes its speed
_OUTPUT_WITH_VALUE = ("-o", "--output-file", "-MF", "--dependency-output", "-odir")
_NEUTRAL_WITH_VALUE = ("--threads", "-t", "--keep-dir", "-keep-dir")
_NEUTRAL = ("--keep", "-keep")
# options that put the real paths of sources and headers into the object
_LINE_INFO = ("-lineinfo", "--generate-line-info")  # reusable through header views
_PATHS_IN_OUTPUT = ("-G", "--device-debug", *_LINE_INFO, "-g", "-ggdb", "-g3")
_LOCK_WAIT = 4 * 3600.0  # seconds a cell waits for another's compile of the same unit
_VARIANTS = 8  # header sets kept per key (a changed header adds one)


@dataclass(frozen=True, kw_only=True)
class WrapConfig:
    """One job's settings of the wrapper (its CONFIG file)."""

    downstream: tuple[str, ...]  # the command the compile goes to (a launcher and nvcc)
    compiler: str = "nvcc"  # the real nvcc (or hipcc), whose installation keys a unit
    kind: str = "nvcc"  # or "hipcc"
    arch_flags: tuple[str, ...] | None = None  # enforce: the cell's flags
    store: str | None = None  # the unit store; None: no reuse
    job: str = ""
    site_packages: str | None = None
    python_include: tuple[str, ...] = ()
    project: str | None = None
    log: str | None = None
    host_compiler: str | None = None  # nvcc's host compiler when no -ccbin names one
    # a container's cell: its interpreter, asked for its site-packages and include
    # directories, which the wrapper then maps out of each compile itself (`_cell_paths`)
    python: str | None = None
    timeout: float = 4 * 3600.0  # seconds one compile may take
    local: bool = True  # False: a cluster compiles (a unit with line info differs there)

    def to_json(self) -> dict[str, object]:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}  # tuples as JSON lists

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> WrapConfig:
        """The config `to_json` wrote; a value of another type than its field's is refused."""
        if data.get("schema") != SCHEMA or not data.get("downstream"):
            raise ValueError("not a devicewrap config of schema 1 with a downstream command")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = data.get(f.name)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = tuple(value)
            if value is not None and not isinstance(value, (str, tuple, int, float)):
                raise ValueError(f"devicewrap config: {f.name}: {type(value).__name__}")
            if value is not None:
                values[f.name] = value
        return cls(**values)


def _sibling(module: str) -> Any:
    """A standard-library module of the package (`jsonfields`, `toolchain.archopts`):
    imported, or, when this file runs as a script by path, loaded from its file."""
    if __package__:
        return importlib.import_module(f"buildtools.{module}")
    path = Path(__file__).resolve().parents[1].joinpath(*module.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(f"_buildtools_{module.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


_decode_json = _sibling("jsonfields").decode_json  # a store entry is read within its limits
_archopts = _sibling("toolchain.archopts")
_headerview = _sibling("toolchain.headerview")
_ENV_FLAGS, _DEVICE_SOURCES = _archopts.ENV_FLAGS, _archopts.DEVICE_SOURCES


# ------------------------------------------------------------------------ unit reuse


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (nvcc's and gcc's), in order."""
    body = text.replace("\\\r\n", " ").replace("\\\n", " ")
    _, sep, rest = body.partition(": ")
    if not sep:
        _, sep, rest = body.partition(":")
    out: list[str] = []
    current = ""
    i = 0
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest) and rest[i + 1] in " #:":
            current += rest[i + 1]
            i += 2
            continue
        if ch in " \t\r\n":
            if current:
                out.append(current)
            current = ""
        else:
            current += ch
        i += 1
    if current:
        out.append(current)
    return list(dict.fromkeys(out))


def _python_includes() -> tuple[str, ...]:
    """The include directories of the Python running the wrapper (the job's): its own, and
    a virtual environment's `include` (torch's build passes it as -I)."""
    paths = sysconfig.get_paths()
    found = [paths.get("include"), paths.get("platinclude")]
    if sys.prefix != sys.base_prefix:
        found.append(str(Path(sys.prefix) / "include"))
    return tuple(dict.fromkeys(p for p in found if p))


class _Paths:
    """The cell's paths and their placeholders (longest first)."""

    def __init__(self, config: WrapConfig) -> None:
        pairs: list[tuple[str, str]] = []
        # only paths the build maps out of what it writes (-ffile-prefix-map): a unit's
        # bytes never depend on them. Not the object directory: it differs by job and a
        # header generated there keeps its path.
        include = config.python_include or _python_includes()
        self.python = tuple(os.path.realpath(p) for p in include)
        marks = [(config.site_packages, "@SP@"), (config.project, "@PROJ@")]
        marks += [(value, f"@PY{index}@") for index, value in enumerate(include)]
        for value, mark in marks:  # each as spelt (through a link) and resolved
            if value:
                pairs += {(os.path.realpath(value), mark), (str(Path(value).absolute()), mark)}
        self.pairs = sorted(pairs, key=lambda p: -len(p[0]))

    def normal(self, text: str) -> str:
        for value, mark in self.pairs:
            text = text.replace(value, mark)
        return text

    def real(self, text: str) -> str:
        for value, mark in sorted(self.pairs, key=lambda p: -len(p[1])):
            text = text.replace(mark, value)
        return text

    def in_python(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(_inside(real, p) for p in self.python)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + os.sep)


def _sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _tool_digest(store: Path, path: str) -> str:
    """The sha256 of a compiler's file, remembered by its path, size and mtime."""
    real = os.path.realpath(path)
    try:
        st = Path(real).stat()
    except OSError:
        return f"missing:{path}"
    sig = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    memo = store / "tools" / sig
    with contextlib.suppress(OSError):
        return memo.read_text().strip()
    digest = _sha256(real) or f"unreadable:{real}"
    _write_atomic(memo, digest.encode())
    return digest


def _compilers(config: WrapConfig, args: Sequence[str]) -> list[str]:
    """The files whose content decides a compile: nvcc's driver and the programs beside it
    (cicc, ptxas, fatbinary, cudafe++, nvlink), and nvcc's host compiler."""
    nvcc = shutil.which(config.compiler) or config.compiler
    bindir = Path(os.path.realpath(nvcc)).parent
    files = [str(bindir / n) for n in ("nvcc", "ptxas", "fatbinary", "cudafe++", "nvlink")]
    files.append(str(bindir.parent / "nvvm" / "bin" / "cicc"))
    host = None
    for i, word in enumerate(args):
        if word in ("-ccbin", "--compiler-bindir") and i + 1 < len(args):
            host = args[i + 1]
        elif word.startswith(("-ccbin=", "--compiler-bindir=")):
            host = word.split("=", 1)[1]
    host = host or os.environ.get("NVCC_CCBIN") or config.host_compiler or "gcc"
    files.append(shutil.which(host) or host)
    return files


@dataclass(frozen=True)
class _Unit:
    source: str
    output: str
    depfile: str | None


def _unit(args: Sequence[str]) -> _Unit | None:
    """The one device source, its object and dependency file of a `-c` compile; None else."""
    if "-c" not in args and "--compile" not in args:
        return None
    sources = [a for a in args if a.endswith(_DEVICE_SOURCES) and not a.startswith("-")]
    output = depfile = None
    for i, word in enumerate(args[:-1]):
        if word in ("-o", "--output-file"):
            output = args[i + 1]
        elif word in ("-MF", "--dependency-output"):
            depfile = args[i + 1]
    if len(sources) != 1 or output is None:
        return None
    return _Unit(source=sources[0], output=output, depfile=depfile)


def _keyed_words(words: Sequence[str], paths: _Paths) -> list[str]:
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _OUTPUT_WITH_VALUE or word in _NEUTRAL_WITH_VALUE:
            skip = True
        elif word in _NEUTRAL or word.startswith(("--threads=", "--keep-dir=")):
            continue
        else:
            out.append(paths.normal(word))
    return out


def _path_options(args: Sequence[str], env: Mapping[str, str]) -> set[str]:
    """The options of a compile that put real paths into its object, wherever they are given:
    an option's value too (-Xcompiler=-g, --ptxas-options=-lineinfo, "-O3,-g"), quoted or not,
    and nvcc's environment flags."""
    env_words = [w for n in _ENV_FLAGS for w in shlex.split(env.get(n, ""))]
    parts = {p.strip("'\"") for w in (*args, *env_words) for p in re.split(r"[=,\s]", w)}
    return parts & set(_PATHS_IN_OUTPUT)


def _line_info_only(config: WrapConfig, args: Sequence[str], env: Mapping[str, str]) -> bool:
    found = _path_options(args, env) if config.local and config.store else set()
    return bool(found) and found <= set(_LINE_INFO)


def unit_key(
    args: Sequence[str],
    env: Mapping[str, str],
    config: WrapConfig,
    compilers: Sequence[str],
    *,
    line_info: bool = False,
) -> str | None:
    """The key of a compile before its headers are known (None: not a reusable unit). A unit
    with line info (`line_info`, compiled against header views) keeps the project's path."""
    unit = _unit(args)
    if unit is None or unit.depfile is None or config.store is None:
        return None
    kept = _path_options(args, env) - (set(_LINE_INFO) if line_info else set())
    if kept:
        return None
    paths = _Paths(dataclasses.replace(config, project=None) if line_info else config)
    source_digest = _sha256(unit.source)
    if source_digest is None:
        return None
    store = Path(config.store)
    doc = {
        "schema": SCHEMA,
        "compilers": [_tool_digest(store, c) for c in compilers],
        "args": _keyed_words(args, paths),
        "env": {n: _keyed_words(shlex.split(env.get(n, "")), paths) for n in _ENV_FLAGS},
        "source": [paths.normal(os.path.realpath(unit.source)), source_digest],
        "line_info": (_headerview.compile_dir(args) or 1) if line_info else 0,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _cell_paths(config: WrapConfig, args: list[str]) -> tuple[WrapConfig, list[str]]:
    """The config with the site-packages and include directories of `config.python`, and a
    compile's arguments with that site-packages mapped out of the object, as the host's build
    maps it (a container's path differs per Python: lib/python3.X)."""
    code = (
        "import json, sysconfig as s; p = s.get_paths(); "
        "print(json.dumps([p[k] for k in ('purelib', 'include', 'platinclude')]))"
    )
    done = subprocess.run(
        [config.python or "python", "-I", "-c", code], capture_output=True, timeout=60, check=True
    )
    paths = _decode_json(done.stdout, what="the cell's paths")
    if not (isinstance(paths, list) and len(paths) == 3 and all(isinstance(p, str) for p in paths)):
        raise ValueError(f"it answered {done.stdout[:200]!r}, not three paths")
    site, *include = paths
    if "-c" in args:
        args += [
            w
            for path in dict.fromkeys((site, os.path.realpath(site)))
            for w in ("-Xcompiler", f"-ffile-prefix-map={path}=/site-packages")
        ]
    paths = tuple(dict.fromkeys(include))
    return dataclasses.replace(config, site_packages=site, python_include=paths, python=None), args


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """An exclusive lock on `path`, waited for at most _LOCK_WAIT (False: not had)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        deadline = time.monotonic() + _LOCK_WAIT
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.2)
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _entry_path(store: Path, key: str) -> Path:
    return store / "entries" / key[:2] / f"{key}.json"


def _read_entry(store: Path, key: str) -> list[dict[str, object]]:
    try:
        data = _decode_json(_entry_path(store, key).read_bytes(), what="a unit store entry")
    except (OSError, ValueError):
        return []
    variants = data.get("variants") if isinstance(data, dict) else None
    return [v for v in variants if isinstance(v, dict)] if isinstance(variants, list) else []


def _matches(variant: Mapping[str, object], paths: _Paths, digests: dict[str, str | None]) -> bool:
    deps = variant.get("deps")
    if not isinstance(deps, list) or not deps:
        return False
    for dep in deps:  # [path, sha256], and mtime_ns for a unit with line info (in its object)
        if not isinstance(dep, list) or len(dep) not in (2, 3):
            return False
        if not all(map(isinstance, dep, (str, str, int))):
            return False
        real = paths.real(dep[0])
        if real not in digests:
            digests[real] = _sha256(real)
        if digests[real] != dep[1] or (len(dep) == 3 and _mtime_ns(real) != dep[2]):
            return False
    return True


def _mtime_ns(path: str) -> int | None:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None


def _reuse(store: Path, key: str, unit: _Unit, paths: _Paths) -> dict[str, object] | None:
    """Copy the stored object whose headers all match into place; the variant, or None."""
    digests: dict[str, str | None] = {}
    for variant in _read_entry(store, key):
        obj = variant.get("object")
        if not isinstance(obj, str) or not re.fullmatch(r"[0-9a-f]{64}", obj):
            continue
        if not _matches(variant, paths, digests):
            continue
        stored = store / "objects" / obj[:2] / obj
        if _sha256(str(stored)) != obj:  # a damaged or replaced object is no hit
            continue
        _write_atomic(Path(unit.output), stored.read_bytes())
        if unit.depfile:
            listed = variant["deps"]
            assert isinstance(listed, list)  # _matches checked each entry
            deps = [paths.real(d[0]) for d in listed]
            escaped = " ".join(d.replace(" ", "\\ ") for d in deps)
            _write_atomic(Path(unit.depfile), f"{unit.output}: {escaped}\n".encode())
        return variant
    return None


def _store(
    store: Path, key: str, unit: _Unit, paths: _Paths, config: WrapConfig, *, line_info: bool
) -> str:
    """Keep the compiled object under its key; what happened, as a word for the log. A unit
    with line info keeps each header's mtime as well, and is not kept when a header came
    from the site-packages (not through a view: its path is the cell's)."""
    assert unit.depfile is not None
    try:
        deps = parse_depfile(Path(unit.depfile).read_text(errors="surrogateescape"))
    except OSError:
        return "no-depfile"
    if any(paths.in_python(d) for d in deps):
        return "python-dependent"
    site = os.path.realpath(config.site_packages) if config.site_packages else None
    if line_info and site and any(_inside(os.path.realpath(d), site) for d in deps):
        return "path-dependent"
    pairs: list[list[object]] = []
    for dep in deps:
        digest = _sha256(dep)
        if digest is None:
            return "unreadable-header"
        pairs.append([paths.normal(os.path.realpath(dep)), digest])
        if line_info:
            pairs[-1].append(_mtime_ns(dep))
    data = Path(unit.output).read_bytes()
    obj = hashlib.sha256(data).hexdigest()
    target = store / "objects" / obj[:2] / obj
    if not target.is_file():
        _write_atomic(target, data)
    variants = [v for v in _read_entry(store, key) if v.get("deps") != pairs]
    variants.insert(0, {"deps": pairs, "object": obj, "job": config.job})
    doc = {"schema": SCHEMA, "variants": variants[:_VARIANTS]}
    _write_atomic(_entry_path(store, key), json.dumps(doc).encode())
    return "stored"


def _log(config: WrapConfig, record: Mapping[str, object]) -> None:
    if not config.log:
        return
    line = json.dumps(record) + "\n"
    with Path(config.log).open("a", encoding="utf-8") as f:  # one write: lines never interleave
        f.write(line)


def _compile(config: WrapConfig, args: Sequence[str], env: Mapping[str, str]) -> int:
    """The compile itself, within the config's deadline (ninja's process group ends it with
    the build)."""
    try:
        return subprocess.run(
            [*config.downstream, *args], env=env, timeout=config.timeout, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        print(f"devicewrap: the compile ran past {config.timeout:.0f} s", file=sys.stderr)
        return 124


def _through_views(
    config: WrapConfig, args: list[str], env: dict[str, str], record: dict[str, object]
) -> tuple[list[str], dict[str, str]] | None:
    """A unit with line info compiled against header views (`toolchain.headerview`); None, and
    why in `record`, when it cannot be."""
    if config.site_packages is None or config.store is None:
        record["why"] = "line info, and the build does not map the site-packages"
        return None
    nvcc = shutil.which(config.compiler) or config.compiler
    done = _headerview.apply(Path(config.store), config.site_packages, args, env, _ENV_FLAGS, nvcc)
    if isinstance(done, str):
        record["why"] = done
        return None
    args, env, record["header_views"] = done
    return args, env


def run(config: WrapConfig, args: list[str], env: dict[str, str]) -> int:
    """One compiler call through the wrapper; the compiler's exit status."""
    started = time.monotonic()
    record: dict[str, object] = {"job": config.job}
    if config.arch_flags is not None:
        args, env, replaced = _archopts.enforce_arch_flags(
            args, env, config.arch_flags, config.kind
        )
        if replaced:
            record["replaced"] = replaced
    unit = _unit(args) if config.kind == "nvcc" else None
    if unit is not None:
        record["unit"] = _Paths(config).normal(os.path.realpath(unit.source))
    key = None
    line_info = unit is not None and _line_info_only(config, args, env)
    viewed = _through_views(config, args, env, record) if line_info else None
    if unit is not None and config.store is not None and (viewed or not line_info):
        view_args, view_env = viewed or (args, env)
        compilers = _compilers(config, view_args)
        key = unit_key(view_args, view_env, config, compilers, line_info=line_info)
    if key is None and unit is not None and config.store is not None:
        record["reuse"] = "not-reusable"
    if key is None or unit is None or config.store is None:
        code = _compile(config, args, env)
        record.update(status=code, seconds=round(time.monotonic() - started, 3))
        _log(config, record)
        return code
    view_args, view_env = viewed or (args, env)
    store = Path(config.store)
    paths = _Paths(dataclasses.replace(config, project=None) if line_info else config)
    with _locked(store / "locks" / key[:2] / f"{key}.lock"):
        variant = _reuse(store, key, unit, paths)
        if variant is not None:
            record.update(reuse="reused", source_job=variant.get("job"), status=0)
            record["seconds"] = round(time.monotonic() - started, 3)
            _log(config, record)
            return 0
        code = _compile(config, view_args, view_env)
        if code == 0:
            record["reuse"] = _store(store, key, unit, paths, config, line_info=line_info)
        elif viewed is not None:  # not through the views, then: as the project wrote it
            record["reuse"] = "view-failed"
            code = _compile(config, args, env)
        else:
            record["reuse"] = "failed"
    record.update(status=code, seconds=round(time.monotonic() - started, 3))
    _log(config, record)
    return code


def main(argv: Sequence[str]) -> int:
    if len(argv) < 1:
        print("devicewrap: usage: devicewrap.py CONFIG ARGS...", file=sys.stderr)
        return 2
    try:
        config = WrapConfig.from_json(_decode_json(Path(argv[0]).read_bytes(), what=argv[0]))
    except (OSError, ValueError) as exc:
        print(f"devicewrap: {argv[0]}: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if env.get(DOWNSTREAM_VAR):
        try:
            to = tuple(shlex.split(env[DOWNSTREAM_VAR]))
            config = dataclasses.replace(config, downstream=to, local=to == config.downstream)
        except ValueError as exc:
            print(f"devicewrap: {DOWNSTREAM_VAR}: {exc}", file=sys.stderr)
            return 2
    args = list(argv[1:])
    if config.python:
        try:
            config, args = _cell_paths(config, args)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            print(f"devicewrap: the paths of {config.python}: {exc}", file=sys.stderr)
            return 2
    return run(config, args, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
