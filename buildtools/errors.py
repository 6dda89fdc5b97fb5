"""Typed errors, each with a distinct exit code and a message a person can act on."""

from __future__ import annotations

__all__ = [
    "BuildFailedError",
    "BuildtoolsError",
    "CheckFailedError",
    "CiDriftError",
    "ConfigError",
    "DistError",
    "ExitCode",
    "ImmutableWheelError",
    "KnowledgeError",
    "NetworkError",
    "NoDeviceError",
    "PlanError",
    "PublishError",
    "SmokeFailedError",
    "Terminated",
    "ToolMissingError",
    "ToolchainError",
    "UnsafeArtefactError",
    "UntrustedRecordError",
    "cleanup_notes",
    "note_cleanup",
]

import enum


class ExitCode(enum.IntEnum):
    """Exit codes per failure class (0 is success)."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    CONFIG = 3
    PLAN = 4
    KNOWLEDGE = 5
    TOOL_MISSING = 6
    TOOLCHAIN = 7
    BUILD_FAILED = 8
    CHECK_FAILED = 9
    PUBLISH = 10
    IMMUTABLE_WHEEL = 11
    SMOKE_FAILED = 12
    DOCTOR_BROKEN = 13  # `buildtools doctor` found a broken torch or extension package
    CI_DRIFT = 14  # `buildtools ci github --check`: the workflows do not match matrix.yaml
    UNSAFE_ARTEFACT = 15  # a wheel, manifest or record names a path outside its place
    FILESYSTEM = 16  # a file or directory cannot be read or written (read-only, full, missing)
    NO_DEVICE = 17  # `buildtools smoke --accelerator cuda|rocm`: the runner's torch sees no GPU
    # the published record (a release's index.json) cannot be authenticated: from a draft,
    # uploaded by someone else than the release workflow, not attested, or linking elsewhere
    UNTRUSTED_RECORD = 19
    NETWORK = 20  # the package index or a published site did not answer (or answered nonsense)
    DIST = 21  # `buildtools dist`: the loopback sccache-dist cluster cannot start, is up already, or is not up
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports it
    TERMINATED = 143  # SIGTERM (a CI cancel, `timeout`): 128 + 15


class BuildtoolsError(Exception):
    """Base class: `str(err)` is the complete, user-facing message."""

    exit_code: ExitCode = ExitCode.INTERNAL


class ConfigError(BuildtoolsError):
    """matrix.yaml is malformed; the message lists every problem as file:line: key: ..."""

    exit_code = ExitCode.CONFIG


class PlanError(BuildtoolsError):
    """The matrix is valid but the plan is impossible (empty, or --strict removals)."""

    exit_code = ExitCode.PLAN


class KnowledgeError(BuildtoolsError):
    """A data file under buildtools/data is invalid (a bug in the package, not the user's)."""

    exit_code = ExitCode.KNOWLEDGE


class NetworkError(BuildtoolsError):
    """A URL could not be read (unreachable, HTTP error, too large, a range ignored)."""

    exit_code = ExitCode.NETWORK


class DistError(BuildtoolsError):
    """`buildtools dist`: the cluster cannot start (its log's last lines say why), is up
    already, or is not up."""

    exit_code = ExitCode.DIST


class ToolMissingError(BuildtoolsError):
    """A required external program or interpreter is missing; message names the install command."""

    exit_code = ExitCode.TOOL_MISSING


class ToolchainError(BuildtoolsError):
    """An environment for a job could not be created or does not match the cell."""

    exit_code = ExitCode.TOOLCHAIN


class BuildFailedError(BuildtoolsError):
    """One or more jobs failed to build; the message names their log files."""

    exit_code = ExitCode.BUILD_FAILED


class CheckFailedError(BuildtoolsError):
    """Static checks produced error findings."""

    exit_code = ExitCode.CHECK_FAILED


class PublishError(BuildtoolsError):
    """The index could not be published (bad wheel, bad site, bad smoke report)."""

    exit_code = ExitCode.PUBLISH


class UntrustedRecordError(PublishError):
    """The published record cannot be authenticated; the release stops with the reason."""

    exit_code = ExitCode.UNTRUSTED_RECORD


class ImmutableWheelError(PublishError):
    """A wheel would replace a published one of the same name with different content."""

    exit_code = ExitCode.IMMUTABLE_WHEEL


class SmokeFailedError(BuildtoolsError):
    """A wheel failed its smoke test on a runner (or no wheel could be tested)."""

    exit_code = ExitCode.SMOKE_FAILED


class NoDeviceError(SmokeFailedError):
    """A GPU smoke on a runner whose torch sees no device: nothing was installed or tested."""

    exit_code = ExitCode.NO_DEVICE


class CiDriftError(BuildtoolsError):
    """The generated CI workflows in the repository no longer match matrix.yaml."""

    exit_code = ExitCode.CI_DRIFT


class UnsafeArtefactError(BuildtoolsError):
    """An artefact (wheel member, manifest entry, RECORD or build record) names a path that
    would land outside its directory, or a file name that is not what it must be."""

    exit_code = ExitCode.UNSAFE_ARTEFACT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a cancelled CI job, `timeout`): raised where the process was, so it
    unwinds as Ctrl-C does (children's process groups ended, staging removed)."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def note_cleanup(interrupt: BaseException, done: str) -> None:
    """Record on an interrupt, as it unwinds, what was ended or removed on its way (a child's
    process group, a staging directory); the command line says it in one line."""
    notes: list[str] = interrupt.__dict__.setdefault("cleanup", [])
    notes.append(done)


def cleanup_notes(interrupt: BaseException) -> list[str]:
    """What `note_cleanup` recorded on `interrupt`, in order."""
    return list(interrupt.__dict__.get("cleanup", []))
