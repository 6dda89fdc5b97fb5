"""Creating a venv and installing into it: the one builder, for toolchains and smoke's envs.

uv when `select_installer` picks it (a venv in milliseconds; wheels hard-linked from one
package cache under the cache directory), else, and whenever a uv command fails, the
interpreter's own `python -m venv` and `pip`. A uv failure is logged and retried with pip,
so uv can only make an environment faster, never break one.
"""

from __future__ import annotations

__all__ = ["child_env", "create_venv", "install", "remove_env"]

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from shlex import join as shlex_join
from typing import IO

from ..context import RunContext
from ..ecosystem import load_ecosystem
from ..errors import ToolchainError
from .installer import (
    read_pip_config,
    select_installer,
    uv_cache_dir,
    uv_install_argv,
    uv_options,
    uv_venv_argv,
)


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a process of a venv: without what leaks another environment in, pip quiet."""
    dropped = load_ecosystem().dropped_env
    out = {k: v for k, v in env.items() if k not in dropped}
    out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    out["PIP_NO_INPUT"] = "1"
    return out


def _uv_env(env: Mapping[str, str], cache_dir: Path) -> dict[str, str]:
    out = child_env(env)
    out["UV_CACHE_DIR"] = str(uv_cache_dir(cache_dir, env))
    out.pop("UV_SYSTEM_PYTHON", None)
    return out


def remove_env(root: Path, log: IO[str], why: str) -> None:
    """Remove the environment (or the link) at `root`, saying why."""
    if root.is_symlink():
        log.write(f"[toolchain] removing {root}: {why}\n")
        root.unlink()
    elif root.exists():
        log.write(f"[toolchain] removing {root}: {why}\n")
        shutil.rmtree(root)


def create_venv(
    base_python: Path,
    root: Path,
    *,
    ctx: RunContext,
    cache_dir: Path,
    system_site_packages: bool = False,
    seed: bool = True,
) -> None:
    """A venv of `base_python` at `root`: `uv venv` when uv is there, else `python -m venv`.

    `seed=False` gives a venv without pip or setuptools of its own (they would shadow the
    ones of an environment it sees through `system_site_packages` or a .pth).
    Raises ToolchainError when neither creates it.
    """
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    installer = select_installer(env)
    log.write(f"[toolchain] installer: {installer.name} ({installer.reason})\n")
    python = root / "bin" / "python"
    if installer.uv is not None:
        argv = uv_venv_argv(
            installer.uv,
            base_python,
            root,
            seed=seed,
            system_site_packages=system_site_packages,
        )
        made = runner.run(argv, env=_uv_env(env, cache_dir), log=log)
        if made.ok and python.exists():
            return
        log.write("[toolchain] `uv venv` failed; creating the venv with python -m venv\n")
        remove_env(root, log, "a failed uv venv")
    argv = [str(base_python), "-m", "venv"]
    argv += ["--system-site-packages"] if system_site_packages else []
    argv += [] if seed else ["--without-pip"]
    created = runner.run([*argv, str(root)], env=child_env(env), log=log)
    if not created.ok or not python.exists():
        raise ToolchainError(
            f"`{shlex_join([*argv, str(root)])}` failed (exit {created.returncode})"
        )


def install(
    python: Path,
    requirements: Sequence[str],
    *,
    ctx: RunContext,
    cache_dir: Path,
    extra_index: str | None = None,
) -> None:
    """Install `requirements` into the environment of `python`: uv (shared package cache)
    with pip's configuration translated, else (or when uv fails) its pip. Raises
    ToolchainError when pip fails too."""
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    installer = select_installer(env)
    if installer.uv is not None:
        # pip's configuration files (not `pip config list`: that costs ~0.5 s of pip start-up)
        config = read_pip_config(env, prefix=python.parent.parent)
        options, extra_env = uv_options(config, env)
        uv_env = _uv_env(env, cache_dir)
        uv_env.update(extra_env)
        argv = uv_install_argv(
            installer.uv, python, requirements, options=options, extra_index=extra_index
        )
        if runner.run(argv, env=uv_env, log=log).ok:
            return
        log.write("[toolchain] uv could not install; trying pip (see uv's reason above)\n")
    argv = [str(python), "-m", "pip", "install"]
    if extra_index:
        argv += ["--extra-index-url", extra_index]
    argv += list(requirements)
    result = runner.run(argv, env=child_env(env), log=log)
    if not result.ok:
        raise ToolchainError(
            f"pip could not install {' '.join(requirements)} (exit {result.returncode}); "
            "see the log above for pip's reason"
        )
