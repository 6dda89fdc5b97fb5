"""What a Python environment has installed, as that environment's own interpreter reports it.

`doctor` and `torch: current` both need facts about an environment buildtools may not be
running in: which torch it imports (version, CUDA/HIP, C++ ABI, how it was built, where it
lives), which distributions carry shared objects, and which GPUs torch sees. A small
script runs in a child process of that interpreter, through the Runner, in two steps:

1. a static probe that never imports torch (an import that aborts must not hide the rest):
   torch's location and `torch/version.py`, every distribution with its shared objects
   (from RECORD), its build record, `direct_url.json` and installer;
2. `import torch` in a second process: `torch.__version__`, the C++ ABI flag, the arch list
   it was compiled for and the GPUs it sees. When that process dies, the report says how.
"""

from __future__ import annotations

__all__ = [
    "PROBE_SCHEMA",
    "CurrentTorch",
    "DistInfo",
    "EnvSnapshot",
    "GpuInfo",
    "TorchBuild",
    "TorchInfo",
    "accelerator_of",
    "current_torch",
    "parse_snapshot",
    "probe_current_torch",
    "probe_environment",
    "site_dirs_for_pth",
    "torch_build_kind",
]

import json
import platform
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ToolchainError, ToolMissingError
from ..runner import Runner

PROBE_SCHEMA = 1
TorchBuild = Literal["release", "prerelease", "nightly", "source", "vendor"]
BUILD_WORDS: Mapping[str, str] = {
    "release": "release wheel",
    "prerelease": "pre-release wheel",
    "nightly": "nightly wheel",
    "source": "source build",
    "vendor": "vendor build",
}
_TAG = "BUILDTOOLS_ENV "
_ACCEL_LABEL_RE = re.compile(r"^(?:cpu|cu\d{3,4}|rocm\d+(?:\.\d+)*|xpu)$")
_GIT_LABEL_RE = re.compile(r"^git([0-9a-f]{7,40})$")

# Runs in the inspected interpreter (any CPython >= 3.8): no f-string debugging, no
# walrus, nothing from buildtools. Argument "--import-torch" selects step 2.
_PROBE = r"""
import ast, json, os, platform, sys
TAG = "BUILDTOOLS_ENV "

def literals(path):
    out = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return out
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                v = ast.literal_eval(value)
            except ValueError:
                continue
            if v is None or isinstance(v, (str, bool, int)):
                out[target.id] = v
    return out

def static():
    import importlib.metadata as md, importlib.util, site, sysconfig
    info = {
        "schema": 1,
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": getattr(sys, "base_prefix", sys.prefix),
            "machine": platform.machine(),
        },
        "site_dirs": [],
        "dists": [],
        "torch": None,
    }
    dirs = []
    try:
        dirs += list(site.getsitepackages())
    except AttributeError:
        pass
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    for p in sys.path:
        if p and os.path.isdir(p) and p not in dirs and os.path.basename(p) in ("site-packages", "dist-packages"):
            dirs.append(p)
    seen_dirs = []
    for d in dirs:
        if os.path.isdir(d) and d not in seen_dirs:
            seen_dirs.append(d)
    info["site_dirs"] = seen_dirs
    seen = set()
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        if key in seen:
            continue  # shadowed by an earlier entry of sys.path
        seen.add(key)
        files = dist.files
        sos = []
        for f in files or ():
            base = f.name
            if base.endswith(".so") or ".so." in base:
                sos.append(os.path.normpath(str(dist.locate_file(f))))
        def text(name):
            try:
                return dist.read_text(name)
            except Exception:
                return None
        info["dists"].append({
            "name": name,
            "version": dist.version,
            "location": os.path.normpath(str(dist.locate_file(""))),
            "shared_objects": sos,
            "has_record": files is not None,
            "build_record": text("buildtools.json"),
            "direct_url": text("direct_url.json"),
            "installer": (text("INSTALLER") or "").strip() or None,
            # only where doctor reads them (an exact torch pin): keeps the output small
            "requires": list(dist.requires or []) if (sos or key == "torch") else [],
        })
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        pkg = os.path.dirname(os.path.abspath(spec.origin))
        info["torch"] = {
            "package_dir": pkg,
            "version_py": literals(os.path.join(pkg, "version.py")),
        }
    return info

def imported():
    out = {}
    try:
        import torch
    except BaseException as exc:
        out["error"] = type(exc).__name__ + ": " + str(exc)
        return out
    out["version"] = str(torch.__version__)
    out["file"] = os.path.abspath(torch.__file__)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["hip"] = getattr(torch.version, "hip", None)
    out["git_version"] = getattr(torch.version, "git_version", None)
    try:
        out["cxx11_abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    except AttributeError:
        out["cxx11_abi"] = None
    gpus = []
    try:
        out["arch_list"] = list(torch.cuda.get_arch_list())
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                gpus.append({
                    "index": i,
                    "name": str(p.name),
                    "capability": [int(p.major), int(p.minor)],
                    "gcn_arch": getattr(p, "gcnArchName", None),
                })
    except Exception as exc:
        out["gpu_error"] = type(exc).__name__ + ": " + str(exc)
    out["gpus"] = gpus
    return out

if "--import-torch" in sys.argv:
    print(TAG + json.dumps({"imported": imported()}))
else:
    print(TAG + json.dumps(static()))
"""


# --- records -------------------------------------------------------------------------------


def accelerator_of(cuda: str | None, hip: str | None) -> str:
    """torch.version.cuda/hip → the accelerator name: '13.0' → 'cu130', '7.2.x' → 'rocm7.2'."""
    if cuda:
        major, _, rest = cuda.partition(".")
        return f"cu{major}{rest.split('.')[0] or '0'}"
    if hip:
        parts = re.split(r"[.-]", hip)
        return f"rocm{parts[0]}.{parts[1] if len(parts) > 1 else '0'}"
    return "cpu"


def torch_build_kind(
    version: str, *, direct_url: Mapping[str, Any] | None = None, has_record: bool = True
) -> TorchBuild:
    """How this torch came to be: a release/pre-release/nightly wheel, a source or vendor build.

    A source build is an install from a local directory (`direct_url.json` with `dir_info`),
    an installation without RECORD (`setup.py develop`), or a version like
    '2.13.0a0+git1a2b3c4'. A vendor build (NVIDIA NGC's '2.8.0a0+5228986c39.nv25.06')
    carries a local label that is not an accelerator. Nightlies are '.devYYYYMMDD'.
    """
    if direct_url is not None and "dir_info" in direct_url:
        return "source"
    if not has_record:
        return "source"
    try:
        v = Version(version)
    except InvalidVersion:
        return "source"
    local = v.local or ""
    first = local.split(".")[0]
    if _GIT_LABEL_RE.match(first):
        return "source"
    if local and not _ACCEL_LABEL_RE.match(local):
        return "vendor"
    if v.is_devrelease:
        return "nightly"
    if v.is_prerelease:
        return "prerelease"
    return "release"


def _file_url_path(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    """One installed distribution, with the shared objects its RECORD lists."""

    name: str
    version: str
    location: Path  # the directory its RECORD paths are relative to (site-packages)
    shared_objects: tuple[Path, ...] = ()
    has_record: bool = True
    build_record: str | None = None  # raw text of <dist-info>/buildtools.json
    direct_url: Mapping[str, Any] | None = None
    installer: str | None = None
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def editable(self) -> bool:
        info = (self.direct_url or {}).get("dir_info")
        return isinstance(info, dict) and bool(info.get("editable"))

    @property
    def source_dir(self) -> Path | None:
        """The local source directory it was installed from, when that is recorded."""
        if not self.direct_url or "dir_info" not in self.direct_url:
            return None
        url = self.direct_url.get("url")
        return _file_url_path(url) if isinstance(url, str) else None


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """A GPU torch sees: CUDA compute capability, or the ROCm gfx arch."""

    index: int
    name: str
    capability: tuple[int, int] | None = None
    gcn_arch: str | None = None  # "gfx90a:sramecc+:xnack-"

    @property
    def arch(self) -> str:
        """'sm_90' for CUDA, 'gfx90a' for ROCm."""
        if self.gcn_arch:
            return self.gcn_arch.split(":", 1)[0]
        if self.capability is None:
            return "unknown"
        return f"sm_{self.capability[0]}{self.capability[1]}"


@dataclass(frozen=True, kw_only=True)
class TorchInfo:
    """The torch an environment imports; `imported` is None when the import was not tried."""

    version: str
    package_dir: Path
    cuda: str | None = None
    hip: str | None = None
    git_version: str | None = None
    debug: bool | None = None
    dist_version: str | None = None
    has_record: bool = True
    direct_url: Mapping[str, Any] | None = None
    installer: str | None = None
    imported: bool | None = None
    import_error: str | None = None
    cxx11_abi: bool | None = None
    arch_list: tuple[str, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()

    @property
    def site(self) -> Path:
        """The directory holding the torch package (its site-packages)."""
        return self.package_dir.parent

    @property
    def accelerator(self) -> str:
        return accelerator_of(self.cuda, self.hip)

    @property
    def public_version(self) -> str:
        try:
            return Version(self.version).public
        except InvalidVersion:
            return self.version

    @property
    def build(self) -> TorchBuild:
        return torch_build_kind(
            self.version, direct_url=self.direct_url, has_record=self.has_record
        )

    @property
    def git_short(self) -> str | None:
        if self.git_version and re.fullmatch(r"[0-9a-f]{7,40}", self.git_version):
            return self.git_version[:7]
        return None


@dataclass(frozen=True, kw_only=True)
class EnvSnapshot:
    """A Python environment as its interpreter reports it."""

    python: Path
    python_version: str  # "3.11.7"
    implementation: str = "cpython"
    prefix: Path | None = None
    base_prefix: Path | None = None
    machine: str = field(default_factory=platform.machine)
    site_dirs: tuple[Path, ...] = ()
    dists: tuple[DistInfo, ...] = ()
    torch: TorchInfo | None = None

    @property
    def python_xy(self) -> str:
        return ".".join(self.python_version.split(".")[:2])

    @property
    def in_venv(self) -> bool:
        return self.prefix is not None and self.prefix != self.base_prefix

    @property
    def platform(self) -> str:
        return f"linux_{self.machine}"


# --- parsing -------------------------------------------------------------------------------


def _tagged(output: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith(_TAG):
            data = json.loads(line[len(_TAG) :])
            if isinstance(data, dict):
                return data
    raise ValueError("no probe result in the output")


def _json_or_none(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_snapshot(static_output: str, import_output: str | None = None) -> EnvSnapshot:
    """Read the probe's outputs (the static one, and the `import torch` one if it ran)."""
    data = _tagged(static_output)
    py = data["python"]
    dists = tuple(
        DistInfo(
            name=str(d["name"]),
            version=str(d["version"]),
            location=Path(d["location"]),
            shared_objects=tuple(Path(p) for p in d.get("shared_objects", ())),
            has_record=bool(d.get("has_record", True)),
            build_record=_opt_str(d.get("build_record")),
            direct_url=_json_or_none(d.get("direct_url")),
            installer=_opt_str(d.get("installer")),
            requires=tuple(str(r) for r in d.get("requires", ())),
        )
        for d in data.get("dists", ())
    )
    torch: TorchInfo | None = None
    raw = data.get("torch")
    if isinstance(raw, dict):
        values = raw.get("version_py") or {}
        package_dir = Path(raw["package_dir"])
        dist = next(
            (d for d in dists if d.key == "torch" and d.location == package_dir.parent), None
        )
        dist = dist or next((d for d in dists if d.key == "torch"), None)
        version = _opt_str(values.get("__version__")) or (dist.version if dist else "unknown")
        torch = TorchInfo(
            version=version,
            package_dir=package_dir,
            cuda=_opt_str(values.get("cuda")),
            hip=_opt_str(values.get("hip")),
            git_version=_opt_str(values.get("git_version")),
            debug=values.get("debug") if isinstance(values.get("debug"), bool) else None,
            dist_version=dist.version if dist else None,
            has_record=dist.has_record if dist else False,
            direct_url=dist.direct_url if dist else None,
            installer=dist.installer if dist else None,
        )
        if import_output is not None:
            torch = _merge_import(torch, import_output)
    return EnvSnapshot(
        python=Path(py["executable"]),
        python_version=str(py["version"]),
        implementation=str(py.get("implementation", "cpython")),
        prefix=Path(py["prefix"]) if py.get("prefix") else None,
        base_prefix=Path(py["base_prefix"]) if py.get("base_prefix") else None,
        machine=str(py.get("machine") or platform.machine()),
        site_dirs=tuple(Path(p) for p in data.get("site_dirs", ())),
        dists=dists,
        torch=torch,
    )


def _tail(output: str, lines: int = 6) -> str:
    kept = [ln for ln in output.strip().splitlines() if not ln.startswith(_TAG)]
    return "\n".join(kept[-lines:])


def _merge_import(torch: TorchInfo, output: str) -> TorchInfo:
    try:
        data = _tagged(output).get("imported") or {}
    except ValueError:
        return replace(torch, imported=False, import_error=_tail(output) or "no output")
    if data.get("error"):
        return replace(torch, imported=False, import_error=str(data["error"]))
    gpus = tuple(
        GpuInfo(
            index=int(g.get("index", i)),
            name=str(g.get("name", "")),
            capability=(int(g["capability"][0]), int(g["capability"][1]))
            if g.get("capability")
            else None,
            gcn_arch=_opt_str(g.get("gcn_arch")),
        )
        for i, g in enumerate(data.get("gpus", ()))
    )
    return replace(
        torch,
        version=_opt_str(data.get("version")) or torch.version,
        cuda=_opt_str(data.get("cuda")) or torch.cuda,
        hip=_opt_str(data.get("hip")) or torch.hip,
        git_version=_opt_str(data.get("git_version")) or torch.git_version,
        imported=True,
        cxx11_abi=data.get("cxx11_abi") if isinstance(data.get("cxx11_abi"), bool) else None,
        arch_list=tuple(str(a) for a in data.get("arch_list", ())),
        gpus=gpus,
    )


# --- running -------------------------------------------------------------------------------


def probe_environment(
    python: Path,
    *,
    runner: Runner,
    env: Mapping[str, str] | None = None,
    import_torch: bool = True,
    log: IO[str] | None = None,
    timeout: float = 300,
) -> EnvSnapshot:
    """Ask `python` what it has installed (and, with `import_torch`, what torch reports).

    The interpreter runs as the user runs it (no -I: PYTHONPATH and the user site count,
    as they do for the import that fails). Raises ToolMissingError when it does not run.
    """
    result = runner.run(
        [str(python), "-c", _PROBE], env=env, log=log, capture=True, timeout=timeout
    )
    if not result.ok:
        raise ToolMissingError(
            f"{python}: does not run as a Python interpreter (exit {result.returncode}): "
            f"{_tail(result.output) or 'no output'}; pass --python PATH of the environment's "
            "interpreter (e.g. .venv/bin/python)"
        )
    try:
        snapshot = parse_snapshot(result.output)
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolMissingError(
            f"{python}: its report could not be read ({exc}); is it CPython >= 3.8?"
        ) from exc
    if snapshot.torch is None or not import_torch:
        return snapshot
    imported = runner.run(
        [str(python), "-c", _PROBE, "--import-torch"],
        env=env,
        log=log,
        capture=True,
        timeout=timeout,
    )
    output = imported.output
    if not imported.ok:
        signal = f" (killed by signal {-imported.returncode})" if imported.returncode < 0 else ""
        output = (
            f"`import torch` exited {imported.returncode}{signal}: "
            f"{_tail(imported.output) or 'no output'}"
        )
        return replace(snapshot, torch=replace(snapshot.torch, imported=False, import_error=output))
    return replace(snapshot, torch=_merge_import(snapshot.torch, output))


# --- torch: current ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CurrentTorch:
    """The torch of the running environment: the host facts a `torch: current` cell uses."""

    python: str  # the interpreter whose environment holds torch
    python_version: str  # "3.11.7"
    platform: str  # "linux_x86_64"
    version: str  # torch.__version__, "2.13.0+cpu"
    cuda: str | None = None
    hip: str | None = None
    cxx11_abi: bool = True
    git_version: str | None = None
    build: TorchBuild = "release"
    site: str = ""  # the directory holding the torch package
    arch_list: tuple[str, ...] = ()  # torch.cuda.get_arch_list() where torch answered

    @property
    def accelerator(self) -> str:
        return accelerator_of(self.cuda, self.hip)

    @property
    def python_xy(self) -> str:
        return ".".join(self.python_version.split(".")[:2])

    @property
    def public_version(self) -> str:
        return Version(self.version).public

    @property
    def git_short(self) -> str | None:
        if self.git_version and re.fullmatch(r"[0-9a-f]{7,40}", self.git_version):
            return self.git_version[:7]
        return None


def current_torch(snapshot: EnvSnapshot, *, cxx11_abi: bool | None = None) -> CurrentTorch:
    """The `torch: current` facts of an environment; ToolchainError when it has no usable torch.

    `cxx11_abi` is what the caller read from libc10 when torch did not say (no import).
    """
    torch = snapshot.torch
    if torch is None:
        raise ToolchainError(
            f"torch: current: {snapshot.python} has no torch; run buildtools with the "
            "interpreter of the environment that has it, or pass --torch-python PATH"
        )
    if torch.imported is False:
        raise ToolchainError(
            f"torch: current: `import torch` fails in {snapshot.python}: {torch.import_error}; "
            "`buildtools doctor` explains why"
        )
    try:
        Version(torch.version)
    except InvalidVersion:
        raise ToolchainError(
            f"torch: current: torch reports version {torch.version!r}, not a PEP 440 version"
        ) from None
    abi = torch.cxx11_abi if torch.cxx11_abi is not None else cxx11_abi
    return CurrentTorch(
        python=str(snapshot.python),
        python_version=snapshot.python_version,
        platform=snapshot.platform,
        version=torch.version,
        cuda=torch.cuda,
        hip=torch.hip,
        cxx11_abi=True if abi is None else abi,
        git_version=torch.git_version,
        build=torch.build,
        site=str(torch.site),
        arch_list=torch.arch_list,
    )


def site_dirs_for_pth(snapshot: EnvSnapshot) -> Sequence[Path]:
    """The directories a `.pth` must add so another venv imports this environment's torch."""
    dirs: list[Path] = []
    if snapshot.torch is not None:
        dirs.append(snapshot.torch.site)
    dirs += [d for d in snapshot.site_dirs if d not in dirs]
    return dirs


def probe_current_torch(
    python: Path | None,
    *,
    runner: Runner,
    env: Mapping[str, str],
    log: IO[str] | None = None,
) -> CurrentTorch:
    """The torch of `python`'s environment (default: $BUILDTOOLS_TORCH_PYTHON, else this one)."""
    import sys

    if python is None:
        python = Path(env.get("BUILDTOOLS_TORCH_PYTHON") or sys.executable)
    snapshot = probe_environment(python, runner=runner, env=env, log=log)
    return current_torch(snapshot)
