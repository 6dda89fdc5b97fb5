"""How toolchain environments are created and filled: uv through a shared package cache, or pip.

uv unpacks every wheel once into its cache and hard-links the files into each new
environment, so a second environment with the same torch costs seconds instead of the
minutes of unpacking a torch and its CUDA wheels again. pip stays the fallback: when uv is
not on PATH, when `BUILDTOOLS_INSTALLER=pip`, or when a uv command fails (the pip command
then runs, and the log says why).

uv does not read pip's configuration, so the options pip would use (`pip config list`:
files and PIP_* variables) are translated into uv's: index-url, extra-index-url,
find-links, no-index, cert and timeout; pip's "best version across all indexes" is
uv's `--index-strategy unsafe-best-match`.
"""

from __future__ import annotations

__all__ = [
    "INSTALLERS",
    "Installer",
    "parse_pip_config",
    "pip_config_files",
    "read_pip_config",
    "select_installer",
    "uv_cache_dir",
    "uv_install_argv",
    "uv_options",
    "uv_venv_argv",
]

import ast
import configparser
import os
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

INSTALLERS = ("auto", "uv", "pip")
_PIP_KEYS = (
    "index-url",
    "extra-index-url",
    "find-links",
    "no-index",
    "cert",
    "timeout",
    "default-timeout",
)


@dataclass(frozen=True, kw_only=True)
class Installer:
    """The tool that installs into toolchain environments; `uv` is None for pip."""

    name: str  # "uv" or "pip"
    uv: Path | None = None
    reason: str = ""  # why this one (for the log)


def select_installer(env: Mapping[str, str]) -> Installer:
    """uv when `BUILDTOOLS_INSTALLER` is auto (default) or uv and uv is on env's PATH, else pip."""
    wanted = env.get("BUILDTOOLS_INSTALLER", "auto").strip().lower() or "auto"
    if wanted not in INSTALLERS:
        return Installer(
            name="pip", reason=f"BUILDTOOLS_INSTALLER={wanted!r} is not one of {INSTALLERS}"
        )
    if wanted == "pip":
        return Installer(name="pip", reason="BUILDTOOLS_INSTALLER=pip")
    found = shutil.which("uv", path=env.get("PATH", ""))
    if found is None:
        return Installer(
            name="pip", reason="uv is not on PATH (pip install uv makes environments share files)"
        )
    return Installer(name="uv", uv=Path(found), reason=f"uv at {found}")


def uv_cache_dir(envs_dir: Path, env: Mapping[str, str]) -> Path:
    """uv's package cache: UV_CACHE_DIR, else beside the environments (hard links need one
    file system)."""
    if env.get("UV_CACHE_DIR"):
        return Path(env["UV_CACHE_DIR"])
    return envs_dir / "uv-cache"


def parse_pip_config(
    output: str,
    *,
    options: Collection[str] = _PIP_KEYS,
    sections: Sequence[str] = ("global", "install"),
) -> dict[str, str]:
    """`pip config list` output → {option: value} for `options`, as pip ranks them: the
    environment (PIP_*) over the later of `sections` over the earlier."""
    rank = {section: i for i, section in enumerate([*sections, ":env:"])}
    ranked: dict[str, tuple[int, str]] = {}
    for line in output.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, option = key.strip().rpartition(".")
        if not sep or not dot or section not in rank or option not in options:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str) and (option not in ranked or rank[section] >= ranked[option][0]):
            ranked[option] = (rank[section], value)
    return {option: value for option, (_, value) in sorted(ranked.items())}


def pip_config_files(
    env: Mapping[str, str], *, prefix: Path, etc: Path = Path("/etc")
) -> list[Path]:
    """pip's configuration files, lowest priority first (global, user, site, PIP_CONFIG_FILE).

    The same places `pip config list` reads, without starting pip (~0.5 s a process).
    """
    if env.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    xdg = env.get("XDG_CONFIG_DIRS") or str(etc / "xdg")
    xdg_dirs = [d for d in xdg.split(os.pathsep) if d]
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs)]
    files += [etc / "pip.conf", home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    files.append(prefix / "pip.conf")
    if env.get("PIP_CONFIG_FILE"):
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def read_pip_config(env: Mapping[str, str], *, prefix: Path, etc: Path = Path("/etc")) -> str:
    """pip's configuration from its files, in `pip config list`'s format (for uv_options)."""
    ranked: dict[str, str] = {}
    for path in pip_config_files(env, prefix=prefix, etc=etc):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for option, value in parser.items(section):
                    ranked[f"{section}.{option}"] = " ".join(value.split())
    return "".join(f"{key}={value!r}\n" for key, value in sorted(ranked.items()))


def _pip_env(env: Mapping[str, str]) -> dict[str, str]:
    """PIP_* variables as pip config options (pip config list may not have run with them)."""
    out: dict[str, str] = {}
    for option in _PIP_KEYS:
        var = "PIP_" + option.upper().replace("-", "_")
        if env.get(var):
            out[option] = env[var]
    return out


def uv_options(
    config_list: str, env: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(uv pip install arguments, extra environment) equivalent to pip's configuration."""
    config = {**parse_pip_config(config_list), **_pip_env(env)}
    args: list[str] = ["--index-strategy", "unsafe-best-match"]
    extra_env: list[tuple[str, str]] = []
    if config.get("no-index", "").strip().lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    if config.get("index-url"):
        args += ["--index-url", config["index-url"].split()[0]]
    for url in config.get("extra-index-url", "").split():
        args += ["--extra-index-url", url]
    for link in config.get("find-links", "").split():
        args += ["--find-links", link]
    if config.get("cert"):
        extra_env.append(("SSL_CERT_FILE", config["cert"]))
    timeout = (config.get("timeout") or config.get("default-timeout") or "").strip()
    if timeout.isdigit():
        extra_env.append(("UV_HTTP_TIMEOUT", timeout))
    return tuple(args), tuple(extra_env)


def uv_venv_argv(
    uv: Path,
    base_python: Path,
    root: Path,
    *,
    seed: bool = True,
    system_site_packages: bool = False,
) -> list[str]:
    """A venv, with pip seeded unless `seed=False` (pip stays usable as the fallback inside it)."""
    argv = [str(uv), "venv", *(["--seed"] if seed else [])]
    argv += ["--system-site-packages"] if system_site_packages else []
    return [*argv, "--python", str(base_python), str(root)]


def uv_install_argv(
    uv: Path,
    python: Path,
    requirements: Sequence[str],
    *,
    options: Sequence[str],
    extra_index: str | None,
) -> list[str]:
    """`uv pip install` into the environment of `python`, hard-linking from the cache."""
    argv = [str(uv), "pip", "install", "--python", str(python), "--link-mode", "hardlink"]
    argv += list(options)
    if extra_index:
        argv += ["--extra-index-url", extra_index]
    return argv + list(requirements)
