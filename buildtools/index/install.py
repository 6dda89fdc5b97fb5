"""The install commands the front page shows: pip and uv, for one project × page × platform.

Pure string building. Every word that comes from the index (a project name, a page name
made of a torch version and an accelerator) is shell-quoted where it needs it, and written
into TOML as an escaped string, so a hostile name copied from the page stays one word.

With no base URL (relative links) the commands start with `SITE_PLACEHOLDER`; the page's
script replaces it with the address it was loaded from.
"""

from __future__ import annotations

__all__ = [
    "SITE_PLACEHOLDER",
    "InstallCommands",
    "install_commands",
    "pypi_accelerator",
    "torch_index",
    "variant_command",
]

import json
import re
import shlex
from dataclasses import dataclass

from ..ecosystem import load_ecosystem
from ..knowledge import Knowledge
from ..model import DEFAULT_PLATFORM
from .settings import IndexSettings
from .variants import Variant

SITE_PLACEHOLDER = "<site-url>"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_NOT_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, kw_only=True)
class InstallCommands:
    """How to install one project for one torch × accelerator × platform."""

    pip: str  # pip with the find-links page
    pip_index: str  # pip with the page's PEP 503 index
    uv: str  # uv pip with the find-links page
    # a uv project's pyproject.toml: [[tool.uv.index]] and [tool.uv.sources], and the
    # `uv add` that uses them (torch too: uv applies sources to direct dependencies only)
    uv_project: str
    # uv's wheel-variants preview on the variant index (index.wheel_variants): uv picks the
    # accelerator and GPU archs itself; None where the row's wheel has no variant twin
    uv_variants: str | None = None


def pypi_accelerator(kb: Knowledge, torch: str, platform: str) -> str | None:
    """The accelerator of the torch wheel PyPI serves for that release and platform
    ('cu130', 'cpu'); None where the knowledge base does not know the release or platform."""
    try:
        release = kb.torch_release(torch)
    except (LookupError, ValueError):
        return None
    if platform == "linux_aarch64":
        cuda = release.aarch64.pypi_cuda
    elif platform == DEFAULT_PLATFORM:
        cuda = release.pypi_cuda
    else:
        return None
    return f"cu{cuda.replace('.', '')}" if cuda else "cpu"


def torch_index(
    variant: Variant, platform: str, settings: IndexSettings, kb: Knowledge
) -> str | None:
    """Where torch of this variant comes from: the matrix's `torch_index` for the
    accelerator, else PyTorch's index of it; None where PyPI's own torch is that build."""
    configured = settings.torch_indexes.get(variant.accelerator)
    if configured:
        return configured
    if pypi_accelerator(kb, variant.torch, platform) == variant.accelerator:
        return None
    return f"{load_ecosystem().pytorch_index}/{variant.accelerator}"


def _url(site: str | None, path: str) -> str:
    """The shell word of a URL below the site (the placeholder stays a visible marker)."""
    if site is None:
        return f"{SITE_PLACEHOLDER}/{shlex.quote(path)}"
    return shlex.quote(f"{site}/{path}")


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def _key(value: str) -> str:
    return value if _BARE_KEY.fullmatch(value) else _toml(value)


def _index_name(*parts: str) -> str:
    """A uv index name (letters, digits, '.', '_', '-') made of the parts."""
    return "-".join(_NOT_NAME.sub("-", p).strip("-") or "x" for p in parts).lower()


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def install_commands(
    project: str, variant: Variant, *, site: str | None, torch_from: str | None
) -> InstallCommands:
    """The commands for `project` from `variant`'s page of the site at `site` (None: relative
    links, the placeholder stands for it), torch from `torch_from` (None: PyPI)."""
    name = shlex.quote(project)
    page = _url(site, variant.page)
    index = _url(site, f"{variant.index_dir}/")
    extra = f" --extra-index-url {shlex.quote(torch_from)}" if torch_from else ""
    own = _index_name(project, variant.index_dir)
    root = SITE_PLACEHOLDER if site is None else site
    # uv applies a source to a direct dependency only: torch is added beside the project
    add = f"uv add {shlex.quote(_one_line(project))}" + (" torch" if torch_from else "")
    lines = [
        f"# in pyproject.toml of a uv project, then: {add}",
        "[[tool.uv.index]]",
        f"name = {_toml(own)}",
        f"url = {_toml(f'{root}/{variant.index_dir}/')}",
        "explicit = true",
    ]
    sources = [f"{_key(project)} = {{ index = {_toml(own)} }}"]
    if torch_from:
        torch_name = _index_name("pytorch", variant.accelerator)
        lines += [
            "",
            "[[tool.uv.index]]",
            f"name = {_toml(torch_name)}",
            f"url = {_toml(torch_from)}",
            "explicit = true",
        ]
        sources.append(f"torch = {{ index = {_toml(torch_name)} }}")
    lines += ["", "[tool.uv.sources]", *sources]
    return InstallCommands(
        pip=f"pip install {name} -f {page}{extra}",
        pip_index=f"pip install {name} --index-url {index}{extra}",
        uv=f"uv pip install {name} --find-links {page}{extra}",
        uv_project="\n".join(lines),
    )


def variant_command(project: str, torch: str, *, site: str | None) -> str:
    """uv's variant-aware install of `project` for torch `torch` from the variant index:
    the torch release is the resolver's (`torch==2.13.*`), the accelerator uv's choice."""
    minor = ".".join(torch.split(".")[:2])
    index = _url(site, "wheel-variants/")  # variantindex.VARIANT_INDEX_DIR
    return (
        f"uv pip install --preview-features wheel-variants --index-url {index} "
        f"{shlex.quote(project)} {shlex.quote(f'torch=={minor}.*')}"
    )
