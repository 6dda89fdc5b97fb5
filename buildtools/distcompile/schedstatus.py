"""What a scheduler says of its cluster: `GET /api/v1/scheduler/status`.

sccache's HTTP API encodes every body with bincode (docs/Distributed.md, "Communication");
the status is `SchedulerStatusResult { num_servers, num_cpus, in_progress }`, three usize
that bincode 1 writes as little-endian u64 (24 bytes). The request carries the client token
as `Authorization: Bearer`, as sccache's client sends it.
"""

from __future__ import annotations

__all__ = ["SchedulerStatus", "decode_status", "scheduler_status"]

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from ..http import DownloadError, HttpClient, HttpLimits, HttpRequest

STATUS_PATH = "/api/v1/scheduler/status"
_STATUS = struct.Struct("<QQQ")


@dataclass(frozen=True, kw_only=True)
class SchedulerStatus:
    num_servers: int
    num_cpus: int
    in_progress: int


def decode_status(body: bytes) -> SchedulerStatus:
    """The bincode body of the status call; ValueError when it is not one."""
    if len(body) != _STATUS.size:
        raise ValueError(f"a status is {_STATUS.size} bytes, got {len(body)}")
    servers, cpus, progress = _STATUS.unpack(body)
    if max(servers, cpus, progress) > 1 << 32:
        raise ValueError("implausible counts")
    return SchedulerStatus(num_servers=servers, num_cpus=cpus, in_progress=progress)


def scheduler_status(
    url: str, token: str, *, env: Mapping[str, str], seconds: float = 5.0
) -> SchedulerStatus | str:
    """The status, or one line saying why the scheduler could not be asked."""
    client = HttpClient(
        HttpLimits(
            request_seconds=seconds, run_seconds=seconds * 2, socket_seconds=seconds, attempts=1
        ),
        env=env,
    )
    request = HttpRequest(
        url=url.rstrip("/") + STATUS_PATH,
        max_bytes=1024,
        secret_headers={"Authorization": f"Bearer {token}"},
    )
    try:
        response = client.send(request)
    except DownloadError as exc:
        return str(exc)
    try:
        return decode_status(response.body)
    except ValueError as exc:
        return f"{url}: not an sccache-dist scheduler's status ({exc})"
