"""The docker backend: each BuildJob is one cibuildwheel run in a builder image.

It shares every step of `buildtools build` with the local backend except where the
compiler runs: the host prepares torch only (for the checks), the container installs the
job's exact torch and toolkit, builds, repairs with the derived excludes and import-tests;
the host then relabels and checks the wheel as for a local build. The options come from
`buildtools.backends.docker.cibw` (pure); this module only executes: it makes the builder image when it is
missing, prefetches wheels for `--offline`, reads the host's pip configuration, and runs
cibuildwheel, every process through the ProcessRunner.
"""

from __future__ import annotations

__all__ = ["DOCKER_INSTALL_HINT", "ENGINE_START_HINT", "DockerBackend"]

import hashlib
import importlib.resources
import importlib.util
import json
import os
import platform
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO

from ...context import RunContext
from ...ecosystem import load_ecosystem
from ...errors import BuildFailedError, ToolchainError, ToolMissingError, UnsafeArtefactError
from ...files import check_wheel_filename
from ...locks import file_lock
from ...model import BuildJob
from ...probe.emulation import BINFMT_DIR, emulation_for, setup_commands
from ...process import ProcessRunner, which
from ...toolchain.buildrequires import extra_build_requirements
from ...toolchain.envs import Toolchain
from ...toolchain.indexprobe import job_index
from ..base import (
    JOB_CACHE_TOOL_VAR,
    JOB_CCACHE_VAR,
    JOB_UNITS_VAR,
    JOB_WRAP_LOG_VAR,
    NVCC_THREADS_VAR,
    BackendOptions,
    BackendSetting,
)
from .cibw import (
    CibwInputs,
    CibwRun,
    PipPassthrough,
    compose_cibuildwheel,
    job_files,
    pip_passthrough,
    prefetch_commands,
    prefetch_platforms,
)
from .cross import (
    CROSS_ENV_VAR,
    CrossToolchain,
    cross_disabled,
    ensure_cross_toolchain,
    write_wrappers,
)
from .images import (
    CONTEXT_FILES,
    BuilderImage,
    builder_image,
    docker_dir,
    load_pins,
    pins_file,
    validate_image_ref,
)
from .uvbin import ensure_uv

_DOCKER_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}  # uname -m → Docker's platform names
DOCKER_INSTALL_HINT = (
    "apt-get install -y docker.io (Debian/Ubuntu; https://docs.docker.com/engine/install/ "
    "elsewhere), then start the engine"
)
ENGINE_START_HINT = (
    "start the Docker engine: `systemctl start docker`, or where systemd does not run "
    "(containers, CI machines): `dockerd >/var/log/dockerd.log 2>&1 &` as root, then wait "
    "for `docker info` to answer"
)


def _cibw_constraints(version: str) -> Path | None:
    """cibuildwheel's own pins for its test venv's virtualenv on that Python."""
    try:
        files = importlib.resources.files("cibuildwheel")
    except ModuleNotFoundError:
        return None
    path = Path(str(files / "resources" / f"constraints-python{version.replace('.', '')}.txt"))
    return path if path.is_file() else None


class DockerBackend:
    """Builds each job with cibuildwheel in `torch-buildtools/builder:<kind>-<hash>`."""

    name = "docker"
    repairs_inside = True  # the wheel comes back repaired against the container's torch
    needs_host_toolkit = False  # the host only needs torch, for the checks

    def __init__(
        self,
        setting: BackendSetting,
        options: BackendOptions,
        *,
        python: str = sys.executable,
        host_machine: str | None = None,
        binfmt_dir: Path = BINFMT_DIR,
    ) -> None:
        """Made by `backends.registry`; `python`, `host_machine`, `binfmt_dir`: the host's
        (tests give others)."""
        self.kb = setting.kb
        self.cache_dir = setting.cache_dir
        self.env = dict(setting.env)
        self.offline = options.offline
        self.max_jobs = options.max_jobs
        base_image = options.base_image
        self.base_image = (
            validate_image_ref(base_image, what="--base-image") if base_image else None
        )
        self.python = python
        self.setup_emulation = options.setup_emulation
        self.host_machine = host_machine or platform.machine()
        self.binfmt_dir = binfmt_dir
        self._pip: PipPassthrough | None = None

    # ---------------------------------------------------------------- engine and tools

    def preflight(self, runner: ProcessRunner) -> None:
        """Fail before any job when the engine, cibuildwheel or the Dockerfiles are missing."""
        docker = which("docker", install_hint=DOCKER_INSTALL_HINT, path=self.env.get("PATH"))
        result = runner.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            env=self.env,
            capture=True,
            timeout=60,
        )
        if not result.ok:
            tail = result.output.strip().splitlines()[-1:] or ["(no output)"]
            raise ToolMissingError(
                f"Docker engine: not running or not reachable (`docker info`: {tail[0]}); "
                + ENGINE_START_HINT
            )
        if importlib.util.find_spec("cibuildwheel") is None:
            raise ToolMissingError(
                "cibuildwheel: not installed in this environment; install it with: "
                "pip install 'cibuildwheel>=3' (or pip install -e '.[docker]')"
            )
        docker_dir(self.env)

    # ------------------------------------------------------------------ builder image

    def image_for(self, job: BuildJob, *, base_id: str | None = None) -> BuilderImage:
        """The builder image of `job` (name and inputs; nothing is built)."""
        directory = docker_dir(self.env)
        return builder_image(
            job,
            docker=directory,
            pins=load_pins(pins_file(self.env)),
            base_override=self.base_image,
            base_id=base_id,
        )

    def _local_id(self, image: str, runner: ProcessRunner) -> str | None:
        result = runner.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", image],
            env=self.env,
            capture=True,
        )
        lines = result.output.strip().splitlines() if result.ok else []
        return lines[-1] if lines and lines[-1].startswith("sha256:") else None

    def _pip_download(
        self, argv: list[str] | tuple[str, ...], *, dest: Path, runner: ProcessRunner, log: IO[str]
    ) -> None:
        """Run one `pip download` unless the same one already completed into `dest`."""
        key = hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()[:20]
        marker = dest / ".prefetched" / key
        with file_lock(dest / ".prefetched" / ".lock"):
            if marker.is_file():
                log.write(f"# prefetch: already done ({marker})\n")
                return
            result = runner.run(argv, env=self._child_env(), log=log)
            if not result.ok:
                raise ToolchainError(
                    f"prefetching wheels failed (exit {result.returncode}): {shlex.join(argv)}; "
                    "every requirement needs a wheel for the container's Python and platform "
                    "(see pip's reason in the log)"
                )
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(shlex.join(argv) + "\n")

    def ensure_emulation(self, job: BuildJob, *, runner: ProcessRunner, log: IO[str]) -> None:
        """A job for another architecture needs QEMU registered (or set up when allowed)."""
        machine = job.platform.removeprefix("linux_")
        found = emulation_for(machine, host_machine=self.host_machine, binfmt_dir=self.binfmt_dir)
        if found.ok:
            if not found.native:
                log.write(f"# {job.platform} on {self.host_machine}: emulated ({found.reason})\n")
            return
        if not self.setup_emulation:
            raise ToolMissingError(
                f"{job.id}: a {job.platform} build on this {self.host_machine} machine runs "
                f"under QEMU user emulation, which is not set up: {found.reason}. " + found.remedy
            )
        for argv in setup_commands(machine, binfmt_dir=self.binfmt_dir):
            result = runner.run(argv, env=self.env, log=log)
            if not result.ok:
                raise ToolMissingError(
                    f"--setup-emulation: `{shlex.join(argv)}` failed (exit "
                    f"{result.returncode}; it needs root and apt-get). " + found.remedy
                )
        again = emulation_for(machine, host_machine=self.host_machine, binfmt_dir=self.binfmt_dir)
        if not again.ok:
            raise ToolMissingError(f"--setup-emulation ran, but {again.reason}. " + again.remedy)
        log.write(f"# --setup-emulation: {again.reason} registered\n")

    def ensure_image(self, job: BuildJob, *, runner: ProcessRunner, log: IO[str]) -> str:
        """Build the job's builder image unless an image with its tag exists already."""
        self.ensure_emulation(job, runner=runner, log=log)
        base = self.image_for(job).base
        image = self.image_for(job, base_id=self._local_id(base, runner))
        key = image.tag.rsplit(":", 1)[1]
        with file_lock(self.cache_dir / "docker" / ".locks" / key):
            if runner.run(["docker", "image", "inspect", image.tag], env=self.env, capture=True).ok:
                log.write(f"# builder image {image.tag} (FROM {image.base}): present, reused\n")
                return image.tag
            self._build_image(job, image, key, runner=runner, log=log)
        return image.tag

    def _build_image(
        self, job: BuildJob, image: BuilderImage, key: str, *, runner: ProcessRunner, log: IO[str]
    ) -> None:
        context = self.cache_dir / "docker" / "context" / key
        shutil.rmtree(context, ignore_errors=True)
        context.mkdir(parents=True)
        shutil.copy2(image.dockerfile, context / "Dockerfile")
        for path in image.context_files:
            shutil.copy2(path, context / path.name)
        wheels = self.cache_dir / "docker" / "tools-wheels"
        arch = job.platform.removeprefix("linux_")
        download = [self.python, "-m", "pip", "download", "--dest", str(wheels)]
        download += ["--only-binary=:all:", "--python-version", "3.10"]
        for plat in prefetch_platforms(f"manylinux_2_17_{arch}"):
            download += ["--platform", plat]
        # the checkout's file, not the context copy: the same pins are downloaded only once
        requirements = next(p for p in image.context_files if p.name == CONTEXT_FILES[1])
        download += ["-r", str(requirements)]
        self._pip_download(download, dest=wheels, runner=runner, log=log)
        shutil.copytree(wheels, context / "wheels", ignore=shutil.ignore_patterns(".*"))
        argv = ["docker", "build", "--network=none"]
        if arch != "x86_64":
            # FROM resolves to the host's architecture unless told: the arm64 base, emulated
            argv.append(f"--platform=linux/{_DOCKER_ARCH.get(arch, arch)}")
        argv += [
            "--build-arg",
            f"BASE={image.base}",
            "--label",
            f"org.torch-buildtools.base={image.base}",
            "--tag",
            image.tag,
            "--file",
            str(context / "Dockerfile"),
            str(context),
        ]
        result = runner.run(argv, env=self.env, log=log)
        shutil.rmtree(context, ignore_errors=True)
        if not result.ok:
            raise BuildFailedError(
                f"building the builder image {image.tag} FROM {image.base} failed (exit "
                f"{result.returncode}); if the base cannot be pulled (no registry reachable), "
                "make a local one with docker/local-base.sh and pass it with --base-image"
            )

    # ------------------------------------------------------------------ wheels and pip

    def _child_env(self) -> dict[str, str]:
        dropped = load_ecosystem().dropped_env
        env = {k: v for k, v in self.env.items() if k not in dropped}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        env["PIP_NO_INPUT"] = "1"
        return env

    def _torch_index(self, job: BuildJob, runner: ProcessRunner, log: IO[str]) -> str | None:
        return job_index(
            job, Path(self.python), ctx=RunContext(processes=runner, env=self.env, log=log)
        )

    def prefetch(
        self, job: BuildJob, *, runner: ProcessRunner, log: IO[str], extra: Sequence[str] = ()
    ) -> Path:
        """Download every wheel the job's container installs into the shared prefetch dir
        (`extra`: the project's own build requirements)."""
        dest = self.cache_dir / "prefetch"
        for argv in prefetch_commands(
            job,
            python=self.python,
            dest=dest,
            torch_index=self._torch_index(job, runner, log),
            cibw_constraints=_cibw_constraints,
            extra=extra,
        ):
            self._pip_download(argv, dest=dest, runner=runner, log=log)
        return dest

    def pip_config(self, runner: ProcessRunner) -> PipPassthrough:
        """The host's pip configuration for the container (read once per run)."""
        if self._pip is None:
            result = runner.run(
                [self.python, "-m", "pip", "config", "list"], env=self.env, capture=True
            )
            self._pip = pip_passthrough(
                result.output if result.ok else "",
                host_env=self.env,
                is_file=Path.is_file,
                is_dir=Path.is_dir,
            )
        return self._pip

    # ------------------------------------------------------------------------- build

    def compose(self, job: BuildJob, inputs: CibwInputs) -> CibwRun:
        """The cibuildwheel run for `job` with this backend's settings added to `inputs`."""
        return compose_cibuildwheel(
            job,
            replace(
                inputs,
                max_jobs=self.max_jobs or os.cpu_count() or 1,
                offline=self.offline,
                host_python=self.python,
            ),
        )

    def uv_for(self, job: BuildJob, *, runner: ProcessRunner, log: IO[str]) -> Path | None:
        """uv for a native offline job's installs, or None: pip (logged either way)."""
        if job.platform.removeprefix("linux_") != "x86_64" or self.host_machine != "x86_64":
            return None  # uv's static binary is x86_64; an emulated job has the cross one
        found, why = ensure_uv(
            cache_dir=self.cache_dir, python=self.python, env=self._child_env(), runner=runner,
            log=log,
        )  # fmt: skip
        if found is None:
            log.write(f"# installs in the container: pip (no uv: {why})\n")
        else:
            log.write(f"# installs in the container: uv ({found / 'bin' / 'uv'}, {why})\n")
        return found

    def cross_for(
        self, job: BuildJob, *, runner: ProcessRunner, log: IO[str]
    ) -> CrossToolchain | None:
        """The x86_64 cross GCC for an emulated aarch64 job, or None (logged either way)."""
        machine = job.platform.removeprefix("linux_")
        if machine == self.host_machine:
            return None
        plain = f"# compiler for {job.platform}: the image's own, under QEMU emulation"
        if machine != "aarch64" or self.host_machine != "x86_64":
            log.write(f"{plain} (a cross toolchain is made for aarch64 on x86_64 only)\n")
            return None
        if cross_disabled(self.env):
            log.write(f"{plain} ({CROSS_ENV_VAR}={self.env[CROSS_ENV_VAR]})\n")
            return None
        found, why = ensure_cross_toolchain(
            docker_dir=docker_dir(self.env),
            cache_dir=self.cache_dir,
            python=self.python,
            env=self._child_env(),
            runner=runner,
            log=log,
        )
        if found is None:
            log.write(f"{plain}: no cross toolchain ({why})\n")
            return None
        log.write(
            f"# compiler for {job.platform}: the x86_64 cross GCC {found.version} ({found.path}), "
            "run natively inside the emulated container once before-build accepts it\n"
        )
        return found

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        ctx: RunContext,
    ) -> list[Path]:
        """One cibuildwheel run; returns the wheel it built, repaired and import-tested."""
        env, runner, log = ctx.env, ctx.processes, ctx.stream
        image = self.ensure_image(job, runner=runner, log=log)
        job_dir = build_dir / "container"
        job_dir.mkdir(parents=True, exist_ok=True)
        for name, text in job_files(job, never_bundle=self.kb.never_bundle).items():
            (job_dir / name).write_text(text, encoding="utf-8")
        cross = self.cross_for(job, runner=runner, log=log)
        if cross is not None:
            write_wrappers(job_dir)
        uv_dir = None
        if self.offline:
            extra = extra_build_requirements(project_dir)
            wheels: Path | None = self.prefetch(job, runner=runner, log=log, extra=extra)
            pip, index = None, None
            uv_dir = None if cross is not None else self.uv_for(job, runner=runner, log=log)
        else:
            wheels, pip, index = None, self.pip_config(runner), self._torch_index(job, runner, log)
        run = self.compose(
            job,
            CibwInputs(
                image=image,
                project_dir=project_dir,
                output_dir=out_dir,
                job_dir=job_dir,
                wheels_dir=wheels,
                pip=pip,
                torch_index=index,
                # build_job names the job's compiler cache (absent: --no-ccache, no ccache)
                ccache_dir=Path(env[JOB_CCACHE_VAR]) if env.get(JOB_CCACHE_VAR) else None,
                cache_tool=env.get(JOB_CACHE_TOOL_VAR) or "ccache",
                gha_cache=env.get("SCCACHE_GHA_ENABLED", "").lower() in {"on", "true", "1"},
                nvcc_threads=int(env.get(NVCC_THREADS_VAR) or 1),
                cross_toolchain=cross.path if cross is not None else None,
                uv_dir=uv_dir,
                wrap_log=Path(env[JOB_WRAP_LOG_VAR]) if env.get(JOB_WRAP_LOG_VAR) else None,
                units_dir=Path(env[JOB_UNITS_VAR]) if env.get(JOB_UNITS_VAR) else None,
            ),
        )
        for name, text in run.files:
            (job_dir / name).write_text(text, encoding="utf-8")
        if env.get(JOB_WRAP_LOG_VAR):  # mounted as a file: it must exist (docker makes a dir)
            Path(env[JOB_WRAP_LOG_VAR]).parent.mkdir(parents=True, exist_ok=True)
            Path(env[JOB_WRAP_LOG_VAR]).touch()
        if env.get(JOB_UNITS_VAR):
            Path(env[JOB_UNITS_VAR]).mkdir(parents=True, exist_ok=True)
        cibw_env = {
            k: v
            for k, v in env.items()
            if not k.startswith("CIBW_") and k not in {NVCC_THREADS_VAR, JOB_CACHE_TOOL_VAR}
        }
        ignored = sorted(k for k in env if k.startswith("CIBW_"))
        if ignored:
            log.write(f"# ignoring the host's {', '.join(ignored)}: the plan sets the options\n")
        cibw_env.update(run.options)
        log.write(
            "# the container build by hand:\n# cd "
            + shlex.quote(str(run.cwd))
            + " && "
            + " ".join(f"{k}={shlex.quote(v)}" for k, v in run.options)
            + " "
            + shlex.join(run.argv)
            + "\n"
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        result = runner.run(run.argv, cwd=run.cwd, env=cibw_env, log=log)
        if not result.ok:
            raise BuildFailedError(
                f"cibuildwheel exited {result.returncode} in {image}; the log has the step "
                "that failed (before-build, build, repair or import test)"
            )
        wheels_out = sorted(out_dir.glob("*.whl"))
        if not wheels_out:
            raise BuildFailedError("cibuildwheel finished but produced no wheel")
        for wheel in wheels_out:
            # the container (running the project's own build code) wrote this directory: a
            # link to a host file, or a name that is no wheel's, is not taken as a wheel
            check_wheel_filename(wheel.name, what="container output")
            if wheel.is_symlink() or not wheel.is_file():
                raise UnsafeArtefactError(
                    f"container output {wheel.name} is not a regular file; refusing to use it"
                )
        return wheels_out
