"""The outcome of one wheel's smoke test: the status every smoke module reports in."""

from __future__ import annotations

__all__ = ["SmokeStatus"]

import enum


class SmokeStatus(str, enum.Enum):
    """The outcome of one wheel's smoke test."""

    PASSED = "passed"
    FAILED = "failed"  # could not get that far: env, install, a second libtorch mapped
    ABORTED = "aborted"  # SIGABRT, e.g. c10::Error thrown from a static initializer
    SEGFAULT = "segfault"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong-result"  # the smoke command exited non-zero by itself
    IMPORT_ERROR = "import-error"  # the package, or one of its compiled modules, cannot load
    NO_DEVICE = "no-device"  # a GPU runner whose torch sees no device: nothing was tested
    NOT_COVERED = "not-covered"  # the wheel's device code does not run on the runner's GPU
    SKIPPED = "skipped"

    @property
    def is_failure(self) -> bool:
        return self not in (SmokeStatus.PASSED, SmokeStatus.SKIPPED)
