"""Test tiers: tests/unit must not start processes or touch the network (tripwire)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).parent / "unit"


class TripwireError(AssertionError):
    """A unit test tried to start a process or open a socket."""


def _tripwire(*args: object, **kwargs: object) -> None:
    raise TripwireError(
        "unit tests must not start processes or open sockets; inject a fake Runner "
        "or move the test to tests/integration"
    )


@pytest.fixture(autouse=True)
def _unit_tripwire(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if UNIT_DIR not in Path(str(request.fspath)).parents:
        return
    monkeypatch.setattr(subprocess.Popen, "__init__", _tripwire)
    monkeypatch.setattr(socket.socket, "connect", _tripwire)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)
