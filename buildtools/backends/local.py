"""The local backend: a PEP 517 build (`build --no-isolation`) in the job's torch environment."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ..errors import BuildFailedError
from ..model import BuildJob
from ..runner import Runner
from ..toolchain.envs import Toolchain

__all__ = ["LocalBackend"]


class LocalBackend:
    """PEP 517 build with `build --no-isolation` inside the job's torch environment."""

    name = "local"
    needs_host_toolkit = True
    repairs_inside = False

    def preflight(self, runner: Runner) -> None:
        """Nothing to check ahead: each job's toolchain names what it misses."""

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        env: Mapping[str, str],
        runner: Runner,
        log: IO[str],
    ) -> list[Path]:
        build_dir.mkdir(parents=True, exist_ok=True)
        # A per-job build tree keeps object files of one toolchain away from another's and
        # lets ninja rebuild incrementally (setuptools reads DIST_EXTRA_CONFIG).
        extra_cfg = build_dir / "buildtools-setup.cfg"
        # setuptools skips an extension whose .so is newer than its sources, blind to headers,
        # flags and environment; `force` hands every build to ninja, which tracks all of those.
        extra_cfg.write_text(
            f"[build]\nbuild_base = {build_dir / 'setuptools'}\n\n[build_ext]\nforce = 1\n"
        )
        full_env = {**env, "DIST_EXTRA_CONFIG": str(extra_cfg)}
        argv = [
            str(toolchain.python),
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out_dir),
            str(project_dir),
        ]
        result = runner.run(argv, cwd=project_dir, env=full_env, log=log)
        if not result.ok:
            raise BuildFailedError(f"`python -m build` exited {result.returncode}")
        wheels = sorted(out_dir.glob("*.whl"))
        if not wheels:
            raise BuildFailedError("the build finished but produced no wheel")
        return wheels
