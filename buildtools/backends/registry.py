"""The one registry of backends: name → how to make it, which options it takes, its CI argv.

The CLI's `--backend` choices and their help, the check of backend-only flags, the
`torch: current` rule and the argv a generated CI build job runs all read `BACKENDS`;
nothing outside `backends/` constructs a backend (cibuildwheel's `platforms/__init__.py`
maps platform names to modules the same way). A new backend is a module in `backends/`
and one `BackendSpec` row here.
"""

from __future__ import annotations

__all__ = [
    "BACKENDS",
    "CI_BACKEND",
    "BackendOptions",
    "BackendSetting",
    "BackendSpec",
    "docker_backend",
    "make_backend",
]

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..errors import BuildFailedError
from .base import Backend, BackendOptions, BackendSetting

if TYPE_CHECKING:
    from .docker.backend import DockerBackend


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    """One backend: its help line, its own flags, what it can build and its CI argv."""

    name: str
    help: str
    options: frozenset[str]  # BackendOptions fields that are this backend's own flags
    builds_current_torch: bool  # `torch: current` (a torch on this host) can be built
    ci_args: tuple[str, ...]  # what a generated CI build job appends to `nox -s build --`
    make: Callable[[BackendSetting, BackendOptions], Backend]


def _local(setting: BackendSetting, options: BackendOptions) -> Backend:
    from .local import LocalBackend

    return LocalBackend()


def _docker(setting: BackendSetting, options: BackendOptions) -> Backend:
    return docker_backend(setting, options)


def docker_backend(setting: BackendSetting, options: BackendOptions) -> DockerBackend:
    """The docker backend itself, for the CI steps that prepare its inputs ahead of the
    builds (`ci builder-image`, `ci prefetch`: `ensure_image`, `prefetch`)."""
    from .docker.backend import DockerBackend  # cibuildwheel's options: imported when used

    return DockerBackend(setting, options)


BACKENDS: Mapping[str, BackendSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            BackendSpec(
                name="local",
                help="local venvs",
                options=frozenset(),
                builds_current_torch=True,
                ci_args=("--backend", "local"),
                make=_local,
            ),
            BackendSpec(
                name="docker",
                help="cibuildwheel in builder images",
                options=frozenset({"offline", "base_image", "setup_emulation"}),
                builds_current_torch=False,
                # offline: the host prefetches every wheel the container installs (the
                # Actions cache carries them) and the container builds without network
                ci_args=("--backend", "docker", "--offline"),
                make=_docker,
            ),
        )
    }
)
# the backend of the generated workflows' build jobs (hosted runners build in containers)
CI_BACKEND = "docker"
# the flag each option field is on the command line
_FLAGS = {f.name: "--" + f.name.replace("_", "-") for f in fields(BackendOptions)}


def _set(options: BackendOptions, name: str) -> bool:
    value = getattr(options, name)
    return value is not None and value is not False


def refused_options(name: str, options: BackendOptions) -> list[str]:
    """The flags given that backend `name` does not take (pure)."""
    own = BACKENDS[name].options
    other = {o for spec in BACKENDS.values() for o in spec.options} - own
    return [_FLAGS[o] for o in sorted(other, key=list(_FLAGS).index) if _set(options, o)]


def make_backend(name: str, setting: BackendSetting, options: BackendOptions) -> Backend:
    """The backend `name`, made with `options`; BuildFailedError for a flag it does not take."""
    spec = BACKENDS.get(name)
    if spec is None:
        raise BuildFailedError(f"--backend {name}: unknown; allowed: {', '.join(BACKENDS)}")
    refused = refused_options(name, options)
    if refused:
        owners = sorted(
            n for n, s in BACKENDS.items() if any(_FLAGS[o] in refused for o in s.options)
        )
        verb = "applies" if len(refused) == 1 else "apply"
        raise BuildFailedError(
            f"{' and '.join(refused)} {verb} to "
            f"{' or '.join(f'--backend {o}' for o in owners)} only"
        )
    return spec.make(setting, options)
