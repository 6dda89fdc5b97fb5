"""What every job builder of the workflows shares: the context and the common steps.

Safe by construction: actions pinned by commit SHA (`data/actions.yaml`), checkouts without
persisted credentials, tools installed with `--require-hashes` (nox here, buildtools'
dependencies by the noxfile, from the lock the workflow's `env:` names), no `${{ }}` inside a
`run:` script (values reach scripts through `env:`). Wheel artifacts are never
overwritten (a re-run job of the same name fails instead of replacing a wheel another job
may have smoke-tested), are kept `ci.retention_days` (`ci.pr_retention_days` for pull
requests) and are not compressed again (a wheel is a zip already).
"""

from __future__ import annotations

__all__ = ["WorkflowSpec", "documented"]

from dataclasses import dataclass
from typing import Any

from ..ciplan import layout
from ..ciplan.labels import Label, control_label, is_hosted
from ..ciplan.shapes import Shape
from ..matrix.config import MatrixFile
from .pins import CiPins
from .yamlwriter import Pinned

# Why a job holds a permission: written beside it in the workflow (a reviewer sees the
# reason for every grant; zizmor's undocumented-permissions audit asks for it).
_WHY = {
    ("contents", "read"): "check out the repository",
    ("contents", "write"): "the draft release: its assets, its record, then published",
    ("attestations", "read"): "verify the published record's release attestation",
    ("attestations", "write"): "store the attestations of what is published",
    ("id-token", "write"): "sign the attestations (Sigstore, this job's OIDC identity)",
    ("pages", "write"): "deploy the site",
    ("packages", "read"): "pull the builder images",
    ("packages", "write"): "push the builder images",
    ("actions", "read"): "download the wheels the pull request's run built",
    ("actions", "write"): "start release.yml for the tag (a workflow dispatch)",
    ("statuses", "write"): "post the verdict on the pull request's commit",
}
_JOB_WHY = {
    ("pages", "id-token"): "deploy to GitHub Pages (its OIDC token)",
    ("pypi", "id-token"): "trusted publishing to PyPI",
    ("pypi-dist", "attestations"): "verify the wheels' release attestation",
}


def documented(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with the reason written beside every permission a job holds."""
    for name, job in (doc.get("jobs") or {}).items():
        grants = job.get("permissions")
        if not grants:
            continue
        job["permissions"] = {
            key: Pinned(level, _JOB_WHY.get((name, key)) or _WHY[(key, level)])
            for key, level in grants.items()
        }
    return doc


@dataclass(frozen=True, kw_only=True)
class WorkflowSpec:
    """What every job builder needs: the matrix, the pins, the workflow being written."""

    mf: MatrixFile
    pins: CiPins
    matrix: str  # matrix.yaml relative to the repository root
    kind: str = layout.RELEASE_NAME  # the workflow (layout.WORKFLOW_KINDS)
    shape: Shape | None = None

    @property
    def control(self) -> str:
        """Where plan, publish and status run: always a GitHub-hosted runner."""
        return control_label(self.mf, self.pins.hosted_runners.labels)

    def hosted(self, label: Label) -> bool:
        return is_hosted(label, self.pins.hosted_runners.labels)

    @property
    def margs(self) -> list[str]:
        """`--matrix PATH`, or nothing for ./matrix.yaml."""
        return layout.matrix_args(self.matrix)

    @property
    def trusted(self) -> bool:
        """A workflow a pull request cannot edit or trigger with its own code as the workflow."""
        return self.kind in (layout.RELEASE_NAME, layout.CACHES_NAME)

    @property
    def retention(self) -> int:
        ci = self.mf.matrix.ci
        return ci.retention_days if self.trusted else ci.pr_retention_days

    @property
    def sha(self) -> str | None:
        """The commit later jobs check out (the plan resolved it), or None: the event's."""
        if self.kind in (layout.RELEASE_NAME, layout.SELF_HOSTED_NAME):
            return "${{ needs.plan.outputs.sha }}"
        return None

    @property
    def env(self) -> dict[str, str]:
        """The workflow's `env:`: the noxfile installs buildtools' dependencies from this lock.

        Hashed in CI only: a developer's own Python or machine may have no wheel in it.
        """
        env = {layout.LOCK_ENV: layout.LOCK}
        if self.kind == layout.RELEASE_NAME:
            # whose release.yml may sign what a release publishes (and its records)
            env["BT_DEFAULT_BRANCH"] = "${{ github.event.repository.default_branch }}"
        return env

    def do_not_edit(self) -> str:
        """The first line of every generated file (the drift check looks for the marker)."""
        return f"{layout.GENERATED_MARKER} from {self.matrix}: do not edit by hand."

    def checkout(self, ref: str | None = None) -> dict[str, Any]:
        """Check out (the plan's commit by default) without leaving the token in .git/config."""
        ref = ref if ref is not None else self.sha
        with_: dict[str, Any] = {"persist-credentials": False}
        if ref:
            with_ = {"ref": ref, **with_}
        return {"name": "Check out", "uses": self.pins.uses("actions/checkout"), "with": with_}

    def setup_python(self, versions: str | None = None) -> dict[str, Any]:
        """The pinned CI Python, or the versions a build or smoke job needs."""
        return {
            "name": "Set up Python",
            "uses": self.pins.uses("actions/setup-python"),
            "with": {
                "python-version": versions or self.pins.python.version,
                "allow-prereleases": True,
            },
        }

    def install_tools(self) -> dict[str, Any]:
        """nox (and build) with every dependency, each pinned by sha256."""
        return {
            "name": "Install nox (hashed pins)",
            "run": "python -m pip install --require-hashes --no-deps --only-binary :all: -r "
            + layout.REQUIREMENTS
            + "\n",
        }

    def upload(
        self,
        name: str,
        path: str,
        *,
        wheels: bool = False,
        always: bool = False,
        missing: str = "error",
        hidden: bool = False,
    ) -> dict[str, Any]:
        """An artifact upload: wheels never overwrite; reports and sites may (re-runs)."""
        with_: dict[str, Any] = {"name": name, "path": path, "if-no-files-found": missing}
        if hidden:
            with_["include-hidden-files"] = True
        with_["retention-days"] = self.retention
        if wheels:
            with_["compression-level"] = 0
        else:
            with_["overwrite"] = True
        step: dict[str, Any] = {"name": f"Upload {name.split('-$', maxsplit=1)[0]}"}
        if always:
            step["if"] = "always()"
        step["uses"] = self.pins.uses("actions/upload-artifact")
        step["with"] = with_
        return step

    def download(
        self,
        path: str,
        *,
        name: str | None = None,
        pattern: str | None = None,
        from_run: str | None = None,
        optional: bool = False,
        title: str | None = None,
    ) -> dict[str, Any]:
        """An artifact download (`from_run`: another run's id, read with the job's token)."""
        with_: dict[str, Any] = {}
        if name:
            with_["name"] = name
        if pattern:
            with_["pattern"] = pattern
        with_["path"] = path
        if from_run:
            with_["run-id"] = from_run
            with_["github-token"] = "${{ github.token }}"
        step: dict[str, Any] = {"name": title or f"Download {name or pattern}"}
        if optional:
            # the artifact may not exist (its job failed before uploading): report, go on
            step["continue-on-error"] = True
        step["uses"] = self.pins.uses("actions/download-artifact")
        step["with"] = with_
        return step
