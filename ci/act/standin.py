"""The stand-ins `nox -s ci-run` puts where an action cannot run here (ci/act/standins/).

    python standin.py upload-artifact | download-artifact | attest-build-provenance |
                      upload-pages-artifact | deploy-pages | pypi-publish

Each reads its action's inputs from IN_* variables (the stand-in's action.yml maps them),
does locally what can be done locally, and appends one JSON line saying what would have been
sent to $BT_ACT_LOG; the run prints that log as its list of stood-in steps.

upload-artifact / download-artifact: the pinned commits' dist/ bundles are absent from the
local mirror, so their documented behaviour is reproduced over a run-scoped directory
($BT_ACT_ARTIFACTS/<name>/): path lines with globs and `!` exclusions, the root of the
stored paths (the least common ancestor of the search paths, or a lone file's directory),
hidden files left out unless include-hidden-files, if-no-files-found, overwrite (an
existing name is a conflict), download by name (into path) or by pattern (each artifact in
path/<name>/ unless merge-multiple). The others (attestations, Pages, PyPI) need GitHub's
OIDC token: nothing is signed or deployed, what would have been is recorded.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

_GLOB = set("*?[")


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def _record(action: str, store: str = "", **fields: object) -> None:
    """One line in the run's log ($BT_ACT_LOG); `store`: a file it is appended to as well."""
    entry: dict[str, object] = {
        "action": action,
        "job": _env("GITHUB_JOB"),
        "step": _env("GITHUB_ACTION"),
    }
    entry.update(fields)
    for path in (os.environ["BT_ACT_LOG"], store):
        if path:
            with open(path, "a", encoding="utf-8") as log:
                log.write(json.dumps(entry, sort_keys=True) + "\n")


def _output(name: str, value: str) -> None:
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        out.write(f"{name}={value}\n")


def _fail(message: str) -> int:
    print(f"::error::{message}")
    return 1


def _store() -> Path:
    return Path(os.environ["BT_ACT_ARTIFACTS"])


def _valid_name(name: str) -> bool:
    bad = set('"\\:<>|*?/\r\n')
    return bool(name) and not (set(name) & bad) and name not in {".", ".."}


def _expand(path: str) -> str:
    return os.path.expanduser(path) if path.startswith("~") else path


def _search_path(pattern: str) -> str:
    """The part of a pattern before its first segment with a glob character."""
    parts = Path(pattern).parts
    keep: list[str] = []
    for part in parts:
        if _GLOB & set(part):
            break
        keep.append(part)
    return str(Path(*keep)) if keep else "."


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _digest(root: Path) -> str:
    sha = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        sha.update(str(file.relative_to(root)).encode() + b"\0")
        sha.update(hashlib.sha256(file.read_bytes()).hexdigest().encode() + b"\n")
    return sha.hexdigest()


def upload_artifact() -> int:
    name = _env("IN_NAME", "artifact")
    if not _valid_name(name):
        return _fail(f"upload-artifact: invalid artifact name {name!r}")
    lines = [_expand(x.strip()) for x in _env("IN_PATH").splitlines() if x.strip()]
    include = [x for x in lines if not x.startswith("!")]
    exclude = [x[1:] for x in lines if x.startswith("!")]
    hidden_ok = _env("IN_INCLUDE_HIDDEN_FILES") == "true"
    search = [os.path.abspath(_search_path(p)) for p in include]
    found: list[Path] = []
    for pattern in include:
        for hit in glob.glob(pattern, recursive=True):
            path = Path(hit)
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            found += [f.resolve() for f in files]
    found = sorted(
        {f for f in found if not any(fnmatch.fnmatch(str(f), os.path.abspath(e)) for e in exclude)}
    )
    if len(search) > 1:
        root = Path(os.path.commonpath(search))
    elif len(found) == 1 and Path(search[0]).resolve() == found[0]:
        root = found[0].parent
    else:
        root = Path(search[0]).resolve() if search else Path.cwd()
    if not hidden_ok:
        found = [f for f in found if not _hidden(f.relative_to(root))]
    if not found:
        mode = _env("IN_IF_NO_FILES_FOUND", "warn")
        message = f"No files were found with the provided path: {_env('IN_PATH')}. No artifacts will be uploaded."
        if mode == "error":
            return _fail(message)
        print(f"::warning::{message}" if mode == "warn" else message)
        return 0
    target = _store() / name
    if target.exists():
        if _env("IN_OVERWRITE") != "true":
            return _fail(
                f"upload-artifact: (409) Conflict: an artifact with name {name!r} already exists"
                " on the workflow run"
            )
        shutil.rmtree(target)
    for file in found:
        dest = target / file.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, dest)
    digest = _digest(target)
    _record("actions/upload-artifact", name=name, files=len(found), digest=digest)
    _output("artifact-id", str(len(list(_store().iterdir()))))
    _output("artifact-digest", digest)
    print(f"upload-artifact (stand-in): {name}: {len(found)} file(s) from {root}")
    return 0


def download_artifact() -> int:
    name, pattern = _env("IN_NAME"), _env("IN_PATTERN")
    dest = Path(_expand(_env("IN_PATH") or os.environ["GITHUB_WORKSPACE"])).resolve()
    store = _store()
    available = sorted(p.name for p in store.iterdir()) if store.is_dir() else []
    if name:
        if name not in available:
            return _fail(f"Unable to download artifact(s): Artifact not found for name: {name}")
        chosen, single = [name], True
    else:
        chosen = [a for a in available if not pattern or fnmatch.fnmatchcase(a, pattern)]
        single = False
    merge = _env("IN_MERGE_MULTIPLE") == "true"
    for artifact in chosen:
        into = dest if single or merge else dest / artifact
        into.mkdir(parents=True, exist_ok=True)
        shutil.copytree(store / artifact, into, dirs_exist_ok=True)
    _record("actions/download-artifact", name=name, pattern=pattern, artifacts=chosen)
    _output("download-path", str(dest))
    print(f"download-artifact (stand-in): {len(chosen)} artifact(s) into {dest}: {chosen}")
    return 0


def _certificate() -> dict[str, str]:
    """What the Sigstore certificate of this job's OIDC identity would say (Fulcio's
    GitHub extensions), from the job's own context. The runner is a hosted one: the run
    maps only GitHub-hosted labels onto this machine (BT_ACT_RUNNER_ENVIRONMENT)."""
    server, repo = _env("GITHUB_SERVER_URL", "https://github.com"), _env("GITHUB_REPOSITORY")
    workflow_ref = (
        _env("GITHUB_WORKFLOW_REF") or f"{repo}/{_env('BT_ACT_WORKFLOW_FILE')}@{_env('GITHUB_REF')}"
    )
    return {
        "buildSignerURI": f"{server}/{workflow_ref}",
        "subjectAlternativeName": f"{server}/{workflow_ref}",
        "sourceRepositoryURI": f"{server}/{repo}",
        "sourceRepositoryRef": _env("GITHUB_REF"),
        "sourceRepositoryDigest": _env("GITHUB_SHA"),
        "runnerEnvironment": _env("BT_ACT_RUNNER_ENVIRONMENT", "self-hosted"),
        "runInvocationURI": f"{server}/{repo}/actions/runs/{_env('GITHUB_RUN_ID')}/attempts/"
        f"{_env('GITHUB_RUN_ATTEMPT', '1')}",
    }


def attest_build_provenance() -> int:
    subjects: list[str] = []
    checksums = _env("IN_SUBJECT_CHECKSUMS")
    if checksums:
        subjects = [x.strip() for x in Path(checksums).read_text().splitlines() if x.strip()]
    if not subjects and not _env("IN_SUBJECT_PATH"):
        return _fail("attest-build-provenance: one of subject-path, subject-checksums is required")
    predicate_path = _env("IN_PREDICATE_PATH")
    predicate = json.loads(Path(predicate_path).read_text()) if predicate_path else {}
    bundle = Path(_env("RUNNER_TEMP") or "/tmp") / f"attestation-{os.getpid()}.json"
    bundle.write_text(json.dumps({"standin": True, "subjects": subjects}))
    _record(
        "actions/attest-build-provenance",
        # the fake GitHub's attestation store (every run of the repository), when there is one
        _env("BT_ACT_ATTESTATIONS"),
        subjects=subjects,
        subject_path=_env("IN_SUBJECT_PATH"),
        predicate_type=_env("IN_PREDICATE_TYPE") or "https://slsa.dev/provenance/v1",
        predicate=predicate,
        certificate=_certificate(),
        signed=False,
    )
    _output("bundle-path", str(bundle))
    _output("attestation-id", "0")
    _output("attestation-url", "")
    print(f"attest-build-provenance (stand-in): {len(subjects)} subject(s) recorded, not signed")
    return 0


def upload_pages_artifact() -> int:
    site = Path(_expand(_env("IN_PATH", "_site"))).resolve()
    if not site.is_dir():
        return _fail(f"upload-pages-artifact: {site}: not a directory")
    target = _store() / _env("IN_NAME", "github-pages")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(site, target, symlinks=False)
    files = sum(1 for p in target.rglob("*") if p.is_file())
    _record("actions/upload-pages-artifact", files=files, digest=_digest(target))
    return 0


def deploy_pages() -> int:
    artifact = _store() / _env("IN_NAME", "github-pages")
    if not artifact.is_dir():
        return _fail(f"deploy-pages: no artifact {artifact.name!r} in this run")
    pages = _env("BT_ACT_PAGES_DIR")
    if pages:  # what the Pages host serves from now on (ci/act/fakegithub.py)
        shutil.rmtree(pages, ignore_errors=True)
        shutil.copytree(artifact, pages)
    _record(
        "actions/deploy-pages",
        artifact=artifact.name,
        digest=_digest(artifact),
        deployed=bool(pages),
    )
    _output("page_url", "https://pages.invalid/")
    return 0


def pypi_publish() -> int:
    files = sorted(p.name for p in Path(_env("IN_PATH", "dist")).glob("*") if p.is_file())
    _record("pypa/gh-action-pypi-publish", files=files, uploaded=False)
    return 0


VERBS = {
    "upload-artifact": upload_artifact,
    "download-artifact": download_artifact,
    "attest-build-provenance": attest_build_provenance,
    "upload-pages-artifact": upload_pages_artifact,
    "deploy-pages": deploy_pages,
    "pypi-publish": pypi_publish,
}

if __name__ == "__main__":
    sys.exit(VERBS[sys.argv[1]]())
