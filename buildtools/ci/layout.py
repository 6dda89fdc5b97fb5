"""Names and commands the generated workflows and the CI helpers share.

One place decides the artifact names, output names and `nox` command lines, so the
workflow (written at generation time) and the plan job's matrix (computed at run time)
cannot disagree.
"""

from __future__ import annotations

__all__ = [
    "ACTIONLINT_CONFIG",
    "DEFAULT_MATRIX",
    "FAMILIES",
    "PR_PROFILE",
    "PR_WORKFLOW",
    "RELEASE_PROFILE",
    "RELEASE_WORKFLOW",
    "SMOKE_OUT",
    "build_argv",
    "matrix_args",
    "smoke_argv",
    "timeout_minutes",
]

import shlex
from collections.abc import Sequence

FAMILIES = ("cpu", "cuda", "rocm")
RELEASE_PROFILE = "release"
PR_PROFILE = "pr"
RELEASE_WORKFLOW = ".github/workflows/release.yml"
PR_WORKFLOW = ".github/workflows/pull-request.yml"
ACTIONLINT_CONFIG = ".github/actionlint.yaml"
DEFAULT_MATRIX = "matrix.yaml"
WHEELHOUSE = "wheelhouse"
SMOKE_OUT = "smoke-results"
ARTIFACTS = "artifacts"
SITE = "_site"

# Minutes per job. A device build compiles for every arch of its list, and pulling a
# CUDA/ROCm builder image alone takes minutes on a hosted runner.
PLAN_TIMEOUT = 15
SMOKE_TIMEOUT = 60
INDEX_TIMEOUT = 30
DEPLOY_TIMEOUT = 15
_BUILD_TIMEOUT = {"cpu": 60, "cuda": 240, "rocm": 240}


def timeout_minutes(family: str) -> int:
    """The build job's timeout for an accelerator family."""
    return _BUILD_TIMEOUT[family]


def matrix_args(matrix: str) -> list[str]:
    """`--matrix PATH` when the workflows read another file than ./matrix.yaml."""
    return [] if matrix == DEFAULT_MATRIX else ["--matrix", matrix]


def build_argv(matrix: str, profile: str, only: Sequence[str]) -> list[str]:
    """`nox -s build` for one BuildJob, in the order `buildtools build` prints it back."""
    argv = ["nox", "-s", "build", "--", *matrix_args(matrix), "--profile", profile]
    for glob in only:
        argv += ["--only", glob]
    return [*argv, "--backend", "docker"]


def smoke_argv(matrix: str, family: str) -> list[str]:
    """`nox -s smoke` on the wheels one build job made, on a runner of `family`."""
    return [
        "nox",
        "-s",
        "smoke",
        "--",
        WHEELHOUSE,
        *matrix_args(matrix),
        "--accelerator",
        family,
        "--out",
        SMOKE_OUT,
    ]


def join(argv: Sequence[str]) -> str:
    return shlex.join(argv)
