"""The files `buildtools init` writes: a commented matrix.yaml and the noxfile sessions.

Both are text made here, so the comments say why each line is there; the matrix is then
loaded back through the ordinary validation before anything is written.
"""

from __future__ import annotations

__all__ = [
    "ArchChoice",
    "MatrixChoice",
    "choose_archs",
    "choose_matrix",
    "render_matrix",
    "render_noxfile",
]

import json
import re
from dataclasses import dataclass

from packaging.version import Version

from .. import __version__
from ..ecosystem import load_ecosystem
from ..knowledge import Knowledge
from ..matrix.config import AcceleratorOverride
from ..model import Accelerator
from .archflags import BuiltArchs, built_for, lines_of
from .inspect import Inspection


@dataclass(frozen=True, kw_only=True)
class MatrixChoice:
    """The axes init proposes, and the profiles' representative cells."""

    torch: tuple[str, ...]
    accelerators: tuple[str, ...]
    pythons: tuple[str, ...]
    pr_cuda: str | None
    pr_python: str


def _q(value: str) -> str:
    return json.dumps(value)  # a YAML double-quoted scalar


def _newest_patch(kb: Knowledge, minor: str, served: frozenset[str] | None) -> str | None:
    """The newest patch of `minor` the index serves (the knowledge base's newest offline)."""
    patches = [p for p in kb.torch[minor].patches if served is None or p in served]
    return patches[-1] if patches else None


def choose_matrix(
    project: Inspection,
    kb: Knowledge,
    torch: tuple[str, ...] = (),
    *,
    cpu_build: bool = True,
    served: frozenset[str] | None = None,
) -> MatrixChoice:
    """The newest torch the knowledge base confirms and the index serves, and the one two
    minors before it (about a year of releases), each at its newest served patch; CPU plus,
    with CUDA sources, the oldest and newest CUDA both torches ship on their index, and every
    Python both support. `served`: the releases the package index serves (None: offline,
    the knowledge base alone). `cpu_build=False` (a CUDA-only project: its C++ sources
    include CUDA headers unconditionally) leaves CPU out when there is CUDA to build."""
    confirmed = sorted(
        (
            minor
            for minor, rel in kb.torch.items()
            if rel.confirmed and _newest_patch(kb, minor, served) is not None
        ),
        key=lambda m: tuple(int(x) for x in m.split(".")),
    )
    if not torch:
        newest = confirmed[-1]
        older = confirmed[max(0, len(confirmed) - 3)]
        torch = tuple(dict.fromkeys(str(_newest_patch(kb, m, served)) for m in (older, newest)))
    rels = [kb.torch[".".join(t.split(".")[:2])] for t in torch]
    pythons = sorted(
        set.intersection(*(set(r.python) for r in rels)),
        key=lambda p: tuple(int(x) for x in p.split(".")),
    )
    accels = ["cpu"] if cpu_build or not project.has_cuda else []
    pr_cuda = None
    if project.has_cuda:
        cudas = sorted(
            set.intersection(*(set(r.cuda) for r in rels)),
            key=Version,
        )
        picked = list(dict.fromkeys([cudas[0], cudas[-1]])) if cudas else []
        accels += [f"cu{c.replace('.', '')}" for c in picked]
        pr_cuda = accels[-1] if picked else None
    pr_python = "3.12" if "3.12" in pythons else pythons[-1]
    return MatrixChoice(
        torch=torch,
        accelerators=tuple(accels),
        pythons=tuple(pythons),
        pr_cuda=pr_cuda,
        pr_python=pr_python,
    )


@dataclass(frozen=True, kw_only=True)
class ArchChoice:
    """What one CUDA accelerator's build really compiles, and the arch_list that says it."""

    accelerator: str  # cu130
    built: BuiltArchs
    arch_list: str | None  # None: not written (why_not says why)
    why_not: str | None = None


def choose_archs(
    project: Inspection, choice: MatrixChoice, kb: Knowledge
) -> tuple[ArchChoice, ...]:
    """Per CUDA accelerator of `choice` whose archs the project's own flags decide: the
    archs as TORCH_CUDA_ARCH_LIST, when the files fix them and every torch of the matrix
    accepts them (the plan refuses an arch list its torch's cpp_extension rejects)."""
    out = []
    for name in choice.accelerators:
        accel = Accelerator.parse(name)
        if accel.kind != "cuda" or accel.version is None:
            continue
        built = built_for(project.arch_flags, accel.version)
        if built is None:
            continue
        arch_list = built.arch_list()
        why = None if arch_list else built.describe()
        for torch in choice.torch if arch_list else ():
            rejected = kb.unaccepted_archs(torch, arch_list or "")
            if rejected:
                why = (
                    f"torch {torch} does not accept {', '.join(rejected)} in an arch list "
                    f"(its cpp_extension raises 'Unknown CUDA arch'), so the plan would refuse "
                    f'"{arch_list}"'
                )
                break
        out.append(
            ArchChoice(
                accelerator=name,
                built=built,
                arch_list=None if why else arch_list,
                why_not=why,
            )
        )
    return tuple(out)


def _yaml_item(name: str) -> str:
    """A list item as a plain scalar when YAML reads it back as that string, else quoted."""
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", name)
    special = name.lower() in ("true", "false", "null", "yes", "no", "on", "off", "y", "n")
    return name if plain and not special else _q(name)


def _arch_lines(archs: tuple[ArchChoice, ...]) -> list[str]:
    """The accelerators' arch_list entries, each naming the flags it comes from."""
    if not archs:
        return []
    flags = tuple(dict.fromkeys(f for a in archs for f in a.built.flags))
    enforce = "arch_flags" in AcceleratorOverride.model_fields
    offer = (
        "    # arch_flags: enforce   # or: compile the cell's arch_list, replacing the "
        "project's arch flags" + ("" if enforce else " (a newer buildtools)")
    )
    lines = [
        f"  # the project sets its own arch flags ({lines_of(flags)}), so torch's",
        "  # cpp_extension ignores TORCH_CUDA_ARCH_LIST: each arch_list below is what that CUDA",
        "  # version's build really compiles (`buildtools init --dry-run` lists every flag)",
    ]
    for arch in archs:
        built = arch.built
        if arch.arch_list is None:
            lines += [
                f"  # {arch.accelerator}: arch_list left at the default, which is not what it "
                f"compiles: {arch.why_not}",
                f"  # {arch.accelerator}: {{arch_flags: enforce}} would compile the default",
            ]
            continue
        lines += [
            f"  {arch.accelerator}:",
            f"    arch_list: {_q(arch.arch_list)}   # {lines_of(built.flags)}, "
            f"under CUDA {built.cuda}",
        ]
        if built.assumed:
            lines.append(f"    # assuming: {'; '.join(built.assumed)}")
        if built.ptx_only():
            lines.append(
                f"    # also PTX alone for {', '.join(built.ptx_only())} (an arch list cannot "
                "say PTX without device code)"
            )
        lines.append(offer)
    return lines


def _torch_indexes(choice: MatrixChoice) -> list[str]:
    """PyTorch's index per accelerator family, as the reference matrix has them: PyPI serves
    one build of each torch (the CUDA one), so a CPU cell without its index gets a CUDA torch
    (a toolchain error), and a cu126 cell of a torch PyPI serves as cu130 likewise."""
    index = load_ecosystem().pytorch_index
    lines = ["", "accelerators:"]
    if "cpu" in choice.accelerators:
        lines += ["  cpu:", f"    torch_index: {index}/cpu   # PyPI's torch is a CUDA build"]
    if any(a.startswith("cu") for a in choice.accelerators):
        lines += ["  cuda:", f"    torch_index: {index}/{{accelerator}}   # e.g. {index}/cu130"]
    return lines if len(lines) > 2 else []


def render_matrix(
    project: Inspection, choice: MatrixChoice, archs: tuple[ArchChoice, ...] = ()
) -> str:
    """matrix.yaml for `project`, every choice commented; `archs` (choose_archs): the arch
    lists the project's own flags decide."""
    lines = [
        "# Written by `buildtools init` from what the repository's files say; edit freely.",
        "# Reference: the matrix.yaml documentation of torch-buildtools (docs/matrix.md).",
        f"# Build style: {project.describe()}.",
        "version: 1",
        "",
        "project:",
        "  path: .                       # the extension is this repository",
    ]
    if project.name:
        lines.append(f"  name: {_q(project.name)}")
    abi_why = {
        "per-python": "one wheel per Python (the extension uses the full CPython API)",
        "abi3": f"py_limited_api ({project.limited_api}): one abi3 wheel covers every Python",
        "stable": "LibTorch stable ABI: one wheel covers the whole torch range",
    }[project.abi]
    lines.append(f"  abi: {project.abi}              # {abi_why}")
    if project.tests_dir:
        lines += [
            "  # the project's own tests, run against the installed wheel by `nox -s smoke`",
            "  # (--import-mode=importlib: the source tree beside tests/ is never imported)",
            "  smoke: python -m pytest -q -p no:cacheprovider --import-mode=importlib "
            f"{project.tests_dir}",
            f"  smoke_requires: [{', '.join(_yaml_item(r) for r in ('pytest', *project.smoke_requires))}]"
            + (
                "   # pytest and what the tests import at top level"
                if project.smoke_requires
                else "     # the tests import nothing else at top level"
            ),
        ]
    elif project.module:
        lines.append(f'  smoke: python -c "import {project.module}"   # no tests dir: import only')
    if project.force_build is not None:
        name, value = project.force_build
        lines += [
            "  # setup.py would download a prebuilt wheel instead of compiling; its switch:",
            f"  build_env: {{{name}: {_q(value)}}}",
        ]
    if project.env_vars:
        lines += [
            f"  # setup.py reads {', '.join(project.env_vars)}: to set one for every build (and",
            "  # make it part of the build's fingerprint), name it in build_env"
            + ("" if project.force_build else ", e.g."),
        ]
        if project.force_build is None:
            lines.append(f'  # build_env: {{{project.env_vars[0]}: "1"}}')
    cpu_axis = "cpu" in choice.accelerators
    lines += [
        "",
        "axes:",
        f"  torch: [{', '.join(_q(t) for t in choice.torch)}]",
        f"  accelerator: [{', '.join(choice.accelerators)}]"
        + (
            ("   # add rocm7.2 for AMD GPUs" if cpu_axis else "   # CUDA-only sources: no cpu")
            if project.has_cuda
            else "   # no .cu sources: CPU only"
        ),
        f"  python: [{', '.join(_q(p) for p in choice.pythons)}]",
        *_torch_indexes(choice),
        *_arch_lines(archs),
        "",
        "profiles:",
        "  local:",
    ]
    cpu = "cpu" in choice.accelerators
    if cpu or choice.pr_cuda is None:
        lines += [
            "    description: the newest torch, CPU, the Python running buildtools",
            "    select:",
            f"      - {{torch: {_q(choice.torch[-1])}, accelerator: cpu, python: host}}",
        ]
    else:  # CUDA-only: the local build is a CUDA one (the compiler comes as wheels)
        lines += [
            "    description: the newest torch and CUDA (CUDA-only sources, no CPU build), "
            "the Python running buildtools",
            "    select:",
            f"      - {{torch: {_q(choice.torch[-1])}, accelerator: {choice.pr_cuda}, "
            "python: host}",
        ]
    lines += [
        "  pr:",
        "    description: a small representative subset for pull requests",
        "    select:",
    ]
    if cpu or choice.pr_cuda is None:
        lines.append(
            f"      - {{torch: {_q(choice.torch[-1])}, accelerator: cpu, "
            f"python: {_q(choice.pr_python)}}}"
        )
    if choice.pr_cuda:
        lines.append(
            f"      - {{torch: {_q(choice.torch[0])}, accelerator: {choice.pr_cuda}, "
            f"python: {_q(choice.pr_python)}}}"
        )
    lines += [
        "  release:",
        "    description: every cell",
        "",
        "default_profile: local",
        "",
        "# index: {base_url: https://OWNER.github.io/REPO/whl}   # where the release publishes",
        "# runners: {smoke: {cuda: [self-hosted, linux, gpu]}}    # your GPU runner's labels",
        "",
    ]
    return "\n".join(lines)


# The variable the generated workflows set to their hashed lock (ci.layout.LOCK_ENV; adopt
# may not import ci: tests/unit/test_init.py runs this noxfile with it)
LOCK_ENV = "BUILDTOOLS_REQUIREMENTS"
# The variable that overrides where the generated noxfile installs buildtools from.
INSTALL_ENV = "BUILDTOOLS_INSTALL"


def render_noxfile(source: str = __version__) -> str:
    """The sessions the generated workflows call, installing buildtools from `source`.

    `source` (`adopt.origin.running_source()`: where the running buildtools came from) is a
    version of the package index, a path (a checkout or a wheel) or a pip URL;
    BUILDTOOLS_INSTALL overrides it when the sessions run. In the workflows (which set
    LOCK_ENV) buildtools' dependencies install from the hashed lock, then buildtools without
    them; elsewhere by range.
    """
    return f'''"""nox sessions of torch-buildtools (written by `buildtools init`): `nox -l` lists them."""

import os
import pathlib
import re

import nox

# Where buildtools is installed from: what `buildtools init` ran from (a version of the
# package index, a checkout or wheel, a VCS URL). BUILDTOOLS_INSTALL overrides it: a version
# ("0.1.0"), a path (a checkout or a wheel) or a URL ("git+https://...@v0.1.0"). CI needs a
# version or a URL: a path on this machine does not exist on a runner.
SOURCE = os.environ.get("{INSTALL_ENV}") or {json.dumps(source)}
# Set by the generated workflows: buildtools' dependencies pinned by sha256 for the CI Python
# (.github/buildtools-requirements.txt, written by `nox -s ci`).
LOCK = os.environ.get("{LOCK_ENV}")
nox.options.reuse_existing_virtualenvs = True


def requirement(extras: str) -> str:
    """torch-buildtools with `extras`, from SOURCE."""
    if re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", SOURCE):
        return f"torch-buildtools{{extras}}=={{SOURCE}}"
    url = SOURCE if "://" in SOURCE else pathlib.Path(SOURCE).resolve().as_uri()
    return f"torch-buildtools{{extras}} @ {{url}}"


def install(session: nox.Session, extras: str = "") -> None:
    """torch-buildtools: its dependencies hashed from the lock when the workflow names one."""
    buildtools = requirement(extras)
    if not LOCK:
        session.log("{LOCK_ENV} unset: buildtools' dependencies by range, unhashed")
        session.install(buildtools)
        return
    if not os.path.isfile(LOCK):
        session.error(f"{LOCK_ENV}={{LOCK}}: no such file; run `nox -s ci`")
    session.install("--require-hashes", "-r", LOCK)
    session.install("--no-deps", buildtools)


@nox.session
def plan(session: nox.Session) -> None:
    """Print the plan of matrix.yaml."""
    install(session)
    session.run("buildtools", "plan", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Build, repair and check wheels into wheelhouse/."""
    install(session, "[docker]")
    session.run("buildtools", "build", *session.posargs)


@nox.session
def smoke(session: nox.Session) -> None:
    """Install each wheel with its torch and run project.smoke."""
    install(session)
    session.run("buildtools", "smoke", *session.posargs)


@nox.session
def index(session: nox.Session) -> None:
    """Publish wheelhouse/ as a find-links site in site/."""
    install(session)
    session.run("buildtools", "index", *session.posargs)


@nox.session
def ci(session: nox.Session) -> None:
    """Write the GitHub Actions workflows; `-- --check` fails when they no longer match."""
    install(session)
    args = session.posargs
    if not args or args[0].startswith("-"):
        args = ["github", *args]
    session.run("buildtools", "ci", *args)
'''
