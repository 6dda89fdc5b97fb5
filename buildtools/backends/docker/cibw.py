"""cibuildwheel options for one BuildJob: the docker backend's plan, composed purely.

One job is one cibuildwheel run (`python -m cibuildwheel --platform linux`) configured
only through `CIBW_*` environment variables, so the exact configuration is a value tests
can assert on. Every matrix value that reaches a shell or docker is validated or quoted
(docs/docker.md, "No injection"): identifiers from validated Pythons and platforms,
CIBW_ENVIRONMENT values quoted for cibuildwheel's bashlex, commands `shlex.join`ed, image
references validated, mount sources absolute without `:` or `,`.

In the container (see `buildtools.backends.docker.incontainer`): /buildtools/lib holds this
package (read-only), /buildtools/job the job's files (pip constraints, setuptools build dir),
/buildtools/wheels the prefetched wheels (offline), /buildtools/pip/N the host's pip
configuration files (online); a CUDA job's nvcc wrapper is `containerwrap`'s.
"""

from __future__ import annotations

__all__ = [
    "CONTAINER_JOB_DIR",
    "CONTAINER_LIB_DIR",
    "CONTAINER_WHEELS_DIR",
    "TOOLS_PYTHON",
    "CibwInputs",
    "CibwRun",
    "Mount",
    "PipPassthrough",
    "compose_cibuildwheel",
    "identifiers",
    "job_files",
    "pip_passthrough",
    "prefetch_commands",
    "prefetch_platforms",
    "quote_environment",
]

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from ...ecosystem import load_ecosystem
from ...errors import ConfigError
from ...model import PLATFORMS, BuildJob, python_tag
from ...toolchain.buildrequires import extra_build_requirements
from ...toolchain.ccachekeys import nvcc_flags_namespace
from ...toolchain.envs import BUILD_REQUIREMENTS
from ...toolchain.installer import parse_pip_config
from ..base import nvcc_flags_env, nvcc_keep_env, nvcc_seed_env, prefix_maps_env
from .containercache import (
    CONTAINER_CCACHE_DIR,
    GHA_CACHE_VARS,
    cache_env,
    ccbin_assignment,
    masquerade,
    stop_words,
)
from .containerwrap import WrapLayout, container_wrap
from .cross import CROSS_BIN, CROSS_GXX, CROSS_PREFIX, cross_environment
from .images import validate_image_ref
from .incontainer import CUDA_LINK, LIB_LINK_DIR
from .uvbin import UV_BIN, UV_MOUNT, uv_environment

TOOLS_PYTHON = "/opt/buildtools/venv/bin/python"
# the build interpreter inside the container: cibuildwheel puts the job's Python first on PATH
BUILD_PYTHON = "python"
CONTAINER_LIB_DIR = "/buildtools/lib"
CONTAINER_JOB_DIR = "/buildtools/job"
CONTAINER_WHEELS_DIR = "/buildtools/wheels"
CONTAINER_PIP_DIR = "/buildtools/pip"
CONTAINER_BUILD_DIR = "/tmp/buildtools/build"
CONTAINER_BUILD_TEMP = f"{CONTAINER_BUILD_DIR}/temp"  # the object files: ninja's directory
CONTAINER_PROJECT = "/project"  # where cibuildwheel copies the project
_WRAP_LAYOUT = WrapLayout(TOOLS_PYTHON, CONTAINER_LIB_DIR, CONTAINER_JOB_DIR, CONTAINER_PROJECT)
# The sources' paths the compiler sees, absolute or as ccache's base_dir makes them relative
# to the object directory, mapped to `.` as on the host (`build.environment`): the wheel has
# the same __FILE__ strings with and without the compiler cache.
CONTAINER_PREFIX_MAPS = (
    f"{CONTAINER_PROJECT}=.",
    f"{posixpath.relpath(CONTAINER_PROJECT, CONTAINER_BUILD_TEMP)}=.",
)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON_RE = re.compile(r"^3\.\d{1,2}t?$")  # 3.14t: free-threaded
_TAG_RE = re.compile(r"^manylinux_(\d+)_(\d+)_(x86_64|aarch64)$")
_URL_RE = re.compile(r"^(https?|file)://[^\s'\"]+$")
# pip options passed into the container (online mode); anything else stays on the host
_PIP_KEYS = (
    "index-url",
    "extra-index-url",
    "find-links",
    "trusted-host",
    "cert",
    "client-cert",
    "proxy",
    "timeout",
    "default-timeout",
    "retries",
    "prefer-binary",
    "only-binary",
    "no-binary",
    "pre",
    "disable-pip-version-check",
    "progress-bar",
)
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@dataclass(frozen=True, kw_only=True)
class Mount:
    """A host path mounted read-only into the build container."""

    source: Path
    target: str

    def __post_init__(self) -> None:
        text = str(self.source)
        if not self.source.is_absolute() or any(c in text for c in ":,\n\r\0"):
            raise ConfigError(
                f"{text!r} cannot be mounted into the build container: it must be an absolute "
                "path without ':' or ',' (docker's --volume syntax)"
            )

    @property
    def arg(self) -> str:
        return f"--volume={self.source}:{self.target}:ro"


@dataclass(frozen=True, kw_only=True)
class PipPassthrough:
    """The host's pip configuration as container environment, and the files it names."""

    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CibwRun:
    """Exactly what the docker backend runs for one job."""

    argv: tuple[str, ...]
    cwd: Path
    options: tuple[tuple[str, str], ...]  # the CIBW_* variables
    container_env: tuple[tuple[str, str], ...]  # what CIBW_ENVIRONMENT sets, unquoted
    create_args: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()  # more files of the job directory (name, text)

    @property
    def options_dict(self) -> dict[str, str]:
        return dict(self.options)


# --------------------------------------------------------------------------- validation


def _env_name(name: str, where: str) -> str:
    if not _ENV_NAME_RE.match(name):
        raise ConfigError(f"{where}: {name!r} is not an environment variable name")
    return name


def _requirement(text: str, where: str) -> str:
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        raise ConfigError(f"{where}: {text!r} is not a pip requirement: {exc}") from None
    if text.lstrip().startswith("-"):
        raise ConfigError(f"{where}: {text!r} is not a pip requirement")
    return text


def _url(text: str, where: str) -> str:
    if not _URL_RE.match(text):
        raise ConfigError(f"{where}: {text!r} is not an http(s):// or file:// URL")
    return text


def _arch(job: BuildJob) -> str:
    if job.platform not in PLATFORMS:
        raise ConfigError(f"{job.id}: platform {job.platform!r}; allowed: {', '.join(PLATFORMS)}")
    return job.platform.removeprefix("linux_")


def identifiers(job: BuildJob) -> tuple[str, ...]:
    """cibuildwheel build identifiers of the job: cp312-manylinux_x86_64, …"""
    arch = _arch(job)
    out = []
    for python in job.pythons:
        if not _PYTHON_RE.match(python):
            raise ConfigError(f"{job.id}: python {python!r} is not a version such as '3.12'")
        out.append(f"{python_tag(python)}-manylinux_{arch}")
    return tuple(out)


def _bash_quote(value: str) -> str:
    # Not shlex.quote: cibuildwheel's bashlex evaluator does not join its '"'"' back and
    # fails on a ` even inside single quotes; and not bare words either (a value such as
    # `else` is a parse error). Double quotes with \ " $ ` escaped read back exactly
    # (tests/unit/test_cibw.py checks arbitrary text).
    return '"' + "".join("\\" + c if c in '\\"$`' else c for c in value) + '"'


def quote_environment(env: Sequence[tuple[str, str]]) -> str:
    """CIBW_ENVIRONMENT text assigning exactly these values (no expansion, no substitution).

    A value cibuildwheel's parser (bashlex) cannot read even when quoted (it takes `<(` inside
    double quotes for a process substitution) is refused here, naming the variable, rather
    than failing later inside cibuildwheel.
    """
    items = [(_env_name(k, "environment"), v) for k, v in env]
    text = " ".join(f"{k}={_bash_quote(v)}" for k, v in items)
    try:
        from cibuildwheel.environment import EnvironmentParseError, split_env_items
    except ImportError:  # the docker extra is not installed: nothing will parse it here
        return text
    for name, value in items:
        try:
            split_env_items(f"{name}={_bash_quote(value)}")
        except EnvironmentParseError:
            raise ConfigError(
                f"environment variable {name}: the value {value!r} cannot be passed to the "
                "container (cibuildwheel's environment parser rejects it); drop `<(`, `>(` or "
                "write the value another way"
            ) from None
    return text


# ------------------------------------------------------------------------------ prefetch


def prefetch_platforms(platform_tag: str) -> tuple[str, ...]:
    """pip `--platform` values a manylinux image for `platform_tag` can install, newest first.

    pip does not expand `manylinux_2_28_x86_64` to older glibc versions by itself.
    """
    aliases = load_ecosystem().manylinux_aliases  # newest first
    m = _TAG_RE.match(platform_tag)
    if m is None:
        legacy = platform_tag.split("_", 1)
        if legacy[0] in aliases and len(legacy) == 2:
            major, minor = aliases[legacy[0]]
            m = _TAG_RE.match(f"manylinux_{major}_{minor}_{legacy[1]}")
    if m is None or m[1] != "2":
        raise ConfigError(f"platform tag {platform_tag!r}: expected manylinux_2_Y_<arch>")
    top, arch = int(m[2]), m[3]
    oldest = min(y for _, y in aliases.values())  # manylinux1's glibc 2.5
    tags = [f"manylinux_2_{y}_{arch}" for y in range(top, oldest - 1, -1)]
    tags += [f"{name}_{arch}" for name, (_, y) in aliases.items() if y <= top]
    return tuple(tags)


def prefetch_commands(
    job: BuildJob,
    *,
    python: str,
    dest: Path,
    torch_index: str | None,
    cibw_constraints: Callable[[str], Path | None],
    extra: Sequence[str] = (),
) -> tuple[tuple[str, ...], ...]:
    """`pip download` commands that put every wheel the job's container needs into `dest`.

    Per Python of the job: torch at the job's pin, the build requirements (buildtools' and
    `extra`, the project's own), and the toolkit
    (for the build, and torch again for cibuildwheel's test venv), and virtualenv at
    cibuildwheel's own pin (its test step installs it).
    """
    commands = []
    toolkit = job.toolkit.pip_packages if job.toolkit else ()
    identifiers(job)  # validates the Python versions
    for version in job.pythons:
        tag = python_tag(version)
        base = [python, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"]
        # pip download --python-version takes X.Y; the free-threaded ABI is the tag's 't'
        base += ["--python-version", version.removesuffix("t"), "--implementation", "cp"]
        base += ["--abi", tag]
        for plat in prefetch_platforms(job.platform_tag):
            base += ["--platform", plat]
        reqs = [_requirement(job.torch_requirement, f"{job.id}: torch requirement")]
        reqs += [*BUILD_REQUIREMENTS, *(_requirement(r, "[build-system] requires") for r in extra)]
        reqs += [_requirement(r, f"{job.id}: toolkit") for r in toolkit]
        index = (
            ["--extra-index-url", _url(torch_index, f"{job.id}: torch_index")]
            if torch_index
            else []
        )
        commands.append(tuple(base + index + reqs))
        constraints = cibw_constraints(version)
        extra = ["-c", str(constraints)] if constraints is not None else []
        commands.append(tuple([*base, "virtualenv", *extra]))
    return tuple(commands)


# ------------------------------------------------------------------------------ pip config


def pip_passthrough(
    config_list: str,
    *,
    host_env: Mapping[str, str],
    is_file: Callable[[Path], bool],
    is_dir: Callable[[Path], bool],
) -> PipPassthrough:
    """The host's pip configuration for the container (online mode).

    `config_list` is the output of `pip config list` (files and PIP_* variables). Files it
    names (the CA bundle, local find-links and file:// indexes) are mounted read-only under
    /buildtools/pip/N and the values rewritten to point there; proxies pass as they are.
    """
    mounts: dict[Path, Mount] = {}

    def mount(path: Path, name: str = "") -> str:
        if path not in mounts:
            target = f"{CONTAINER_PIP_DIR}/{len(mounts)}" + (f"/{name}" if name else "")
            mounts[path] = Mount(source=path, target=target)
        return mounts[path].target

    env: list[tuple[str, str]] = []
    pip_config = parse_pip_config(
        config_list, options=_PIP_KEYS, sections=("global", "download", "install")
    )
    for option, raw in pip_config.items():
        value = raw
        name = "PIP_" + option.upper().replace("-", "_")
        if option in ("cert", "client-cert"):
            path = Path(raw)
            if not is_file(path):
                continue
            value = mount(path, path.name)
        elif option in ("find-links", "index-url", "extra-index-url"):
            entries = []
            for entry in raw.split():
                local = (
                    Path(entry.removeprefix("file://"))
                    if entry.startswith(("/", "file://"))
                    else None
                )
                if local is None:
                    entries.append(entry)
                elif option == "find-links" and is_dir(local):
                    entries.append(mount(local))
                elif option != "find-links" and is_dir(local):
                    # a PEP 503 tree links its files relative to the index (../../files/…)
                    entries.append(f"file://{mount(local.parent)}/{local.name}")
            if not entries:
                continue
            value = " ".join(entries)
        env.append((name, value))
    env += [(k, host_env[k]) for k in _PROXY_VARS if host_env.get(k)]
    return PipPassthrough(env=tuple(env), mounts=tuple(mounts.values()))


# ------------------------------------------------------------------------------- compose


def job_files(job: BuildJob, *, never_bundle: Sequence[str]) -> dict[str, str]:
    """Files of the job's mounted directory (/buildtools/job), by name."""
    return {
        # keeps every pip in the container (before-build, the test venv) on the job's torch
        "constraints.txt": _requirement(job.torch_requirement, f"{job.id}: torch") + "\n",
        # the project is copied in as is: build in a clean tree, not in a copied build/
        "setup.cfg": f"[build]\nbuild_base = {CONTAINER_BUILD_DIR}\n\n"
        f"[build_ext]\nbuild_temp = {CONTAINER_BUILD_TEMP}\n",
        # the knowledge base's never-bundle patterns, read by `incontainer repair`
        "never-bundle.txt": "".join(f"{p}\n" for p in never_bundle),
    }


def _incontainer(verb: str, *args: str) -> list[str]:
    return [TOOLS_PYTHON, "-m", "buildtools.backends.docker.incontainer", verb, *args]


@dataclass(frozen=True, kw_only=True)
class CibwInputs:
    """What one cibuildwheel run of a job is made from (see `compose_cibuildwheel`)."""

    image: str
    project_dir: Path
    output_dir: Path
    job_dir: Path
    buildtools_dir: Path = Path(__file__).resolve().parents[2]  # at /buildtools/lib/buildtools
    max_jobs: int = 1
    offline: bool = False
    wheels_dir: Path | None = None
    pip: PipPassthrough | None = None
    torch_index: str | None = None
    host_python: str = "python"
    ccache_dir: Path | None = None
    # the tool that wraps the compilers with ccache_dir's cache (sccache or ccache)
    cache_tool: str = "ccache"
    # sccache's GitHub Actions backend instead of ccache_dir (the host's SCCACHE_GHA_ENABLED)
    gha_cache: bool = False
    nvcc_threads: int = 1
    cross_toolchain: Path | None = None
    uv_dir: Path | None = None
    # a CUDA job's nvcc wrapper (containerwrap): its log file and the unit store (host paths)
    wrap_log: Path | None = None
    units_dir: Path | None = None


def compose_cibuildwheel(  # noqa: PLR0912, PLR0915
    job: BuildJob, inputs: CibwInputs
) -> CibwRun:
    """The cibuildwheel run that builds, repairs and import-tests `job` in `inputs.image`:
    `job_dir` holds `job_files(job, …)`; `ccache_dir`, the job's compiler cache, is mounted
    read-write and put in front of c++ and nvcc as on the host; `cross_toolchain` (an
    emulated aarch64 job) is the x86_64 cross GCC mounted at CROSS_PREFIX, CC/CXX the job
    directory's wrappers; `uv_dir` (a native offline job) holds bin/uv, mounted at UV_MOUNT."""
    image, project_dir, output_dir = inputs.image, inputs.project_dir, inputs.output_dir
    buildtools_dir, job_dir, max_jobs = inputs.buildtools_dir, inputs.job_dir, inputs.max_jobs
    offline, wheels_dir, pip = inputs.offline, inputs.wheels_dir, inputs.pip
    torch_index, host_python, ccache_dir = inputs.torch_index, inputs.host_python, inputs.ccache_dir
    nvcc_threads, cross_toolchain, uv_dir = (
        inputs.nvcc_threads,
        inputs.cross_toolchain,
        inputs.uv_dir,
    )
    accel = job.accelerator
    arch = _arch(job)
    image = validate_image_ref(image, what=f"{job.id}: builder image")
    if offline and wheels_dir is None:
        raise ValueError("offline builds need the prefetched wheels_dir")

    mounts = [
        Mount(source=buildtools_dir, target=f"{CONTAINER_LIB_DIR}/buildtools"),
        Mount(source=job_dir, target=CONTAINER_JOB_DIR),
    ]
    create_args: list[str] = []
    sccache = ccache_dir is not None and inputs.cache_tool == "sccache"
    gha = sccache and inputs.gha_cache
    if offline:
        assert wheels_dir is not None
        if not gha:
            create_args.append("--network=none")
        mounts.append(Mount(source=wheels_dir, target=CONTAINER_WHEELS_DIR))
    elif pip is not None:
        mounts += pip.mounts
    if cross_toolchain is not None:
        mounts.append(Mount(source=cross_toolchain, target=CROSS_PREFIX))
    # uv: the cross toolchain's (emulated jobs) or uv_dir's, offline only (prefetched wheels)
    native_uv = offline and cross_toolchain is None and uv_dir is not None
    if native_uv:
        assert uv_dir is not None
        mounts.append(Mount(source=uv_dir, target=UV_MOUNT))
    create_args += [m.arg for m in mounts]
    if ccache_dir is not None:
        Mount(source=ccache_dir, target=CONTAINER_CCACHE_DIR)  # the same path rules
        create_args.append(f"--volume={ccache_dir}:{CONTAINER_CCACHE_DIR}")

    container_env: list[tuple[str, str]] = []
    if accel.kind == "cuda":
        container_env += [
            ("CUDA_HOME", str(CUDA_LINK)),
            ("CPATH", f"{CUDA_LINK}/include"),
            ("LIBRARY_PATH", str(LIB_LINK_DIR)),
        ]
    container_env.append(("DIST_EXTRA_CONFIG", f"{CONTAINER_JOB_DIR}/setup.cfg"))
    uv = offline and (cross_toolchain is not None or native_uv)
    if cross_toolchain is not None:
        container_env += cross_environment(
            CONTAINER_JOB_DIR,
            wheels_dir=CONTAINER_WHEELS_DIR if offline else None,
            constraints=f"{CONTAINER_JOB_DIR}/constraints.txt",
        )
    elif native_uv:
        container_env += uv_environment(
            wheels_dir=CONTAINER_WHEELS_DIR, constraints=f"{CONTAINER_JOB_DIR}/constraints.txt"
        )
    # Byte-compiling torch's thousands of modules costs ~8 s per install (measured), in a
    # container that is thrown away. pip reads a `no-` option's variable inverted:
    # PIP_NO_COMPILE=0 is what turns compiling off (=1 compiles; checked with pip 23 and 26).
    container_env.append(("PIP_NO_COMPILE", "0"))
    if ccache_dir is not None:
        container_env += cache_env(
            inputs.cache_tool,
            project=CONTAINER_PROJECT,
            nvcc=f"{CUDA_LINK}/bin/nvcc" if accel.kind == "cuda" else None,
        )
    launcher = dict(container_env).get("PYTORCH_NVCC")  # the compiler cache's, if any
    wrap = container_wrap(job, inputs.units_dir, inputs.wrap_log, launcher, _WRAP_LAYOUT)
    if wrap is not None:
        for source, target in wrap.mounts:
            create_args.append(f"--volume={Mount(source=source, target=target).source}:{target}")
        container_env = [(k, v) for k, v in container_env if k != "PYTORCH_NVCC"]
        container_env += wrap.env
    # the job's build_env, with the path maps appended to its CFLAGS/CXXFLAGS/NVCC flags
    build_env = {_env_name(k, f"{job.id}: build_env"): v for k, v in job.env}
    build_env.update(prefix_maps_env(CONTAINER_PREFIX_MAPS, build_env, device=accel.kind == "cuda"))
    if accel.kind == "cuda":
        # module ids without cudafe++'s pid, where the job's nvcc has -frandom-seed
        build_env.update(nvcc_seed_env(build_env, job.toolkit.version if job.toolkit else None))
        build_env.update(nvcc_flags_env(nvcc_threads, build_env))
        # nvcc's intermediate files named after the source, not its pid (reproducible), in
        # the object directory, which exists when ninja runs
        build_env.update(
            nvcc_keep_env(PurePosixPath(CONTAINER_BUILD_TEMP), build_env, project_dir=project_dir)
        )
    container_env += list(build_env.items())
    if ccache_dir is not None and inputs.cache_tool == "ccache":  # nvcc's env flags, hashed
        container_env += list(nvcc_flags_namespace(build_env).items())
    if "MAX_JOBS" not in dict(job.env):
        container_env.append(("MAX_JOBS", str(max_jobs)))
    if offline:
        container_env += [("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", CONTAINER_WHEELS_DIR)]
    elif pip is not None:
        container_env += list(pip.env)
    container_env.append(("PIP_CONSTRAINT", f"{CONTAINER_JOB_DIR}/constraints.txt"))

    environment = quote_environment(container_env)
    # the one expanded value: the container's own PATH, behind the masquerade links and uv
    front = [masquerade(inputs.cache_tool)] if ccache_dir is not None else []
    front += [CROSS_BIN if cross_toolchain is not None else UV_BIN] if uv else []
    if sccache and accel.kind == "cuda" and "NVCC_CCBIN" not in build_env:
        environment += ccbin_assignment()  # before the PATH below puts the links first
    if front:
        environment += f' PATH="{":".join(front)}:$PATH"'

    before = ["--python", BUILD_PYTHON]
    torch_req = _requirement(job.torch_requirement, f"{job.id}: torch requirement")
    before += ["--torch", torch_req]
    before += ["--kind", accel.kind]
    if cross_toolchain is not None:
        before += ["--cross", CROSS_GXX]
    if uv:
        before += ["--installer", "uv"]
    if torch_index and not offline:
        before += ["--index-url", _url(torch_index, f"{job.id}: torch_index")]
    if accel.kind == "cuda":
        assert accel.version is not None
        before += ["--cuda", accel.version]
        toolkit = job.toolkit.pip_packages if job.toolkit else ()
        before += [f"--toolkit={_requirement(r, f'{job.id}: toolkit')}" for r in toolkit]
    where = f"{project_dir / 'pyproject.toml'}: [build-system] requires"
    extra = [_requirement(r, where) for r in extra_build_requirements(project_dir)]
    before += ["--", *BUILD_REQUIREMENTS, *extra]

    repair = ["--python", BUILD_PYTHON, "--plat", job.platform_tag]
    policy = job.repair.policy
    if isinstance(policy, tuple):
        repair += ["--command-json", json.dumps(list(policy))]
    else:
        repair += ["--policy", policy]
    repair += ["--never-bundle-file", f"{CONTAINER_JOB_DIR}/never-bundle.txt"]
    repair += [f"--exclude={p}" for p in job.repair.excludes]
    repair += ["-w", "{dest_dir}", "{wheel}"]

    options = [
        ("CIBW_BUILD", " ".join(identifiers(job))),
        ("CIBW_ARCHS_LINUX", arch),
        (f"CIBW_MANYLINUX_{arch.upper()}_IMAGE", image),
        (
            "CIBW_CONTAINER_ENGINE",
            "docker; create_args: "
            + " ".join(shlex.quote(a) for a in create_args)
            + "; disable_host_mount: true",
        ),
        ("CIBW_BUILD_FRONTEND", f"build{'[uv]' if uv else ''}; args: --no-isolation"),
        ("CIBW_BEFORE_BUILD", shlex.join(_incontainer("before-build", *before))),
        ("CIBW_ENVIRONMENT", environment),
        (
            "CIBW_REPAIR_WHEEL_COMMAND",
            stop_words(inputs.cache_tool if sccache else None)
            + shlex.join(_incontainer("repair", *repair)),
        ),
        ("CIBW_TEST_REQUIRES", torch_req),  # a wheel need not require torch (a stable one)
        (
            "CIBW_TEST_COMMAND",
            shlex.join(_incontainer("import-test", "--python", BUILD_PYTHON, "{wheel}")),
        ),
        ("CIBW_BUILD_VERBOSITY", "1"),
    ]
    if gha:
        options.append(("CIBW_ENVIRONMENT_PASS_LINUX", " ".join(GHA_CACHE_VARS)))
    if offline:
        # cibuildwheel 4 installs abi3audit on the host from the index: none offline (as local)
        options.append(("CIBW_AUDIT_COMMAND", ""))
    if any(python.endswith("t") for python in job.pythons):
        # free-threaded CPython (cp314t): cibuildwheel builds it only when enabled
        options.append(("CIBW_ENABLE", "cpython-freethreading"))
    argv = (
        host_python,
        "-m",
        "cibuildwheel",
        "--platform",
        "linux",
        "--output-dir",
        str(output_dir),
        ".",
    )
    return CibwRun(
        argv=argv,
        cwd=project_dir,
        options=tuple(options),
        container_env=tuple(container_env),
        create_args=tuple(create_args),
        files=(wrap.config,) if wrap is not None else (),
    )
