"""The release's own attestation: what it says, and how a file is checked against it.

The publish job attests what it is about to publish, after the smoke tests and only for
the wheels a smoke report passed (and the record, `index.json`): an SLSA provenance
statement (what `gh attestation verify FILE --repo OWNER/REPO` checks by default) and a
release statement of the type `RELEASE_PREDICATE`, whose predicate names the tag, the
tag's commit (the one the vetting step resolved before anything was checked out) and the
run. Both are signed with the job's OIDC identity, so their certificate names the
workflow file and ref that signed them, the run, and the kind of runner.

`verify_files` runs `gh attestation verify --predicate-type RELEASE_PREDICATE --format
json` per file and checks, on what gh verified: the signer is `release.yml` of this
repository at `refs/heads/<default branch>` (a workflow someone pushed to another branch
signs as that branch), on a GitHub-hosted runner, and the predicate names the expected
tag, commit and run. Sigstore's certificate carries the run's own commit (for a
`workflow_run` release, the default branch's head), not the tag's: the tag's commit is
bound through the release predicate, which only this workflow's publish job writes.
"""

from __future__ import annotations

__all__ = [
    "RELEASE_PREDICATE",
    "Expect",
    "Signer",
    "check_verification",
    "record_policy",
    "release_predicate",
    "subjects_text",
    "verify_argv",
    "verify_files",
]

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ciplan import layout
from ..context import RunContext
from ..errors import PublishError
from ..files import sha256_file
from .published_record import RecordPolicy

# The predicate type of the release statement (an identifier, not a fetched document).
RELEASE_PREDICATE = layout.RELEASE_PREDICATE
RELEASE_SCHEMA = "torch-buildtools/release-attestation/v1"
_GH_TIMEOUT = 300.0


@dataclass(frozen=True, kw_only=True)
class Signer:
    """Who may sign what a release publishes: release.yml of `repository` at its default
    branch, on a GitHub-hosted runner."""

    repository: str  # OWNER/REPO
    default_branch: str
    server: str = "https://github.com"

    @property
    def workflow(self) -> str:
        return f"{self.repository}/{layout.RELEASE_WORKFLOW}"

    @property
    def identity(self) -> str:
        """The certificate's subject (SAN): the workflow file at the default branch."""
        return f"{self.server}/{self.workflow}@refs/heads/{self.default_branch}"

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, default_branch: str | None = None) -> Signer:
        repository = env.get("GITHUB_REPOSITORY", "")
        branch = default_branch or env.get("BT_DEFAULT_BRANCH", "")
        if not repository or not branch:
            raise PublishError(
                "no repository or default branch to verify provenance against: set "
                "GITHUB_REPOSITORY and BT_DEFAULT_BRANCH (the workflows pass them)"
            )
        return cls(
            repository=repository,
            default_branch=branch,
            server=env.get("GITHUB_SERVER_URL") or "https://github.com",
        )


@dataclass(frozen=True, kw_only=True)
class Expect:
    """What the release statement of a file must say (None: not checked)."""

    tag: str | None = None
    commit: str | None = None  # the tag's commit
    run_id: str | None = None
    source_digest: str | None = None  # the signing run's own commit (GITHUB_SHA)


def release_predicate(
    *, tag: str, commit: str, repository: str, run_id: str, run_attempt: str
) -> dict[str, Any]:
    """The predicate of the release statement."""
    return {
        "schema": RELEASE_SCHEMA,
        "repository": repository,
        "tag": tag,
        "commit": commit,
        "workflow": layout.RELEASE_WORKFLOW,
        "run_id": run_id,
        "run_attempt": run_attempt,
    }


def subjects_text(files: Sequence[Path]) -> str:
    """`sha256  name` lines (the attest action's `subject-checksums`); names must differ."""
    names = [p.name for p in files]
    if len(set(names)) != len(names):
        raise PublishError("two files to attest have the same name; nothing is attested")
    return "".join(f"{sha256_file(p)}  {p.name}\n" for p in sorted(files, key=lambda p: p.name))


def verify_argv(path: Path, signer: Signer) -> list[str]:
    """The `gh attestation verify` of one file (its JSON result is checked by us too)."""
    return [
        "gh",
        "attestation",
        "verify",
        str(path),
        "--repo",
        signer.repository,
        "--signer-workflow",
        signer.workflow,
        "--predicate-type",
        RELEASE_PREDICATE,
        "--deny-self-hosted-runners",
        "--format",
        "json",
    ]


def _results(output: str) -> list[dict[str, Any]]:
    """The JSON list gh printed (its log lines may surround it)."""
    decoder = json.JSONDecoder()
    offset = 0
    for line in output.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            try:
                value, _ = decoder.raw_decode(output, offset + len(line) - len(line.lstrip()))
            except ValueError:
                pass
            else:
                if isinstance(value, list):
                    return [v for v in value if isinstance(v, dict)]
        offset += len(line)
    return []


def _problem(result: Mapping[str, Any], signer: Signer, expect: Expect) -> str | None:
    verified = result.get("verificationResult") or {}
    cert = (verified.get("signature") or {}).get("certificate") or {}
    statement = verified.get("statement") or {}
    predicate = statement.get("predicate") or {}
    checks = [
        (statement.get("predicateType"), RELEASE_PREDICATE, "predicate type"),
        (
            cert.get("buildSignerURI") or cert.get("subjectAlternativeName"),
            signer.identity,
            "signer",
        ),
        (cert.get("sourceRepositoryRef"), f"refs/heads/{signer.default_branch}", "source ref"),
        (cert.get("runnerEnvironment"), "github-hosted", "runner"),
        (predicate.get("schema"), RELEASE_SCHEMA, "predicate schema"),
        (predicate.get("repository"), signer.repository, "repository"),
    ]
    if expect.source_digest is not None:
        checks.append((cert.get("sourceRepositoryDigest"), expect.source_digest, "run commit"))
    for key, want in (("tag", expect.tag), ("commit", expect.commit), ("run_id", expect.run_id)):
        if want is not None:
            checks.append((predicate.get(key), want, key.replace("_", " ")))
    if expect.run_id is not None:
        uri = str(cert.get("runInvocationURI") or "")
        if f"/actions/runs/{expect.run_id}/" not in uri:
            return f"run: signed in {uri or 'no run'}, not in run {expect.run_id}"
    for got, want, what in checks:
        if got != want:
            return f"{what}: {got!r}, expected {want!r}"
    return None


def check_verification(output: str, *, signer: Signer, expect: Expect) -> str | None:
    """None when one release statement gh verified says what `expect` asks; else why not."""
    results = _results(output)
    if not results:
        return "gh printed no verified attestation"
    problems = [_problem(r, signer, expect) for r in results]
    if any(p is None for p in problems):
        return None
    return "; ".join(sorted({p for p in problems if p}))


def verify_files(
    paths: Sequence[Path],
    *,
    signer: Signer,
    expect: Expect,
    ctx: RunContext,
) -> dict[Path, str]:
    """path → why its provenance does not hold (empty: every file verified)."""
    failures: dict[Path, str] = {}
    for path in paths:
        result = ctx.run(verify_argv(path, signer), capture=True, timeout=_GH_TIMEOUT)
        if not result.ok:
            last = (result.output.strip().splitlines() or ["no output"])[-1]
            failures[path] = f"gh attestation verify failed (exit {result.returncode}): {last}"
            continue
        problem = check_verification(result.output, signer=signer, expect=expect)
        if problem is not None:
            failures[path] = problem
    return failures


def record_policy(
    ctx: RunContext,
    *,
    wheel_url: str | None = None,
    default_branch: str | None = None,
) -> RecordPolicy:
    """How this repository's published record is authenticated (see `cisteps.record`): its
    wheels link into this repository's release downloads (or under `wheel_url`), and its
    release statement was signed by release.yml at the default branch for its own tag."""
    signer = Signer.from_env(ctx.env, default_branch=default_branch)
    prefixes = [f"{signer.server}/{signer.repository}/releases/download/"]
    if wheel_url:
        # only a prefix that ends the host (https://host/…): `https://cdn{x}` would admit
        # any host starting `cdn`
        prefix = wheel_url.split("{", 1)[0]
        if prefix.count("/") >= 3:
            prefixes.append(prefix)

    def authenticate(path: Path, tag: str) -> str | None:
        failures = verify_files([path], signer=signer, expect=Expect(tag=tag), ctx=ctx)
        return failures.get(path)

    return RecordPolicy(prefixes=tuple(prefixes), authenticate=authenticate)
