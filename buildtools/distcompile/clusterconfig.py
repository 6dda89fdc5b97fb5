"""The configuration files of an sccache-dist cluster and of its clients (pure).

The formats are sccache 0.16's (docs/Distributed.md and docs/DistributedQuickstart.md of
mozilla/sccache at v0.16.0; `tools.SCCACHE_VERSION` pins the binaries):

- the scheduler: `public_addr`, `[client_auth]` (a shared token every client sends), and
  `[server_auth]` of type `jwt_hs256` (one secret key; each server gets its own token,
  valid only for its address);
- a build server: `cache_dir` (its toolchains), `public_addr`, `scheduler_url`, the
  `overlay` builder (bubblewrap's `bwrap`, a `build_dir`), `[scheduler_auth]` of type
  `jwt_token` with that server's token;
- a client (what `sccache` reads from $SCCACHE_CONF): `[dist]` with `scheduler_url` and
  `[dist.auth]` of type `token`.

A server token is the JWT `sccache-dist auth generate-jwt-hs256-server-token` writes: HS256
over `{"exp":0,"server_id":"<ip:port>"}` with the base64url-decoded secret key (checked
against the tool's own output in tests/unit/test_dist_config.py). Secrets are made from the
OS random source as sccache's `generate-jwt-hs256-key` makes them (32 bytes, base64url).
"""

from __future__ import annotations

__all__ = [
    "ClusterLayout",
    "ServerSpec",
    "assign_cpus",
    "check_token",
    "client_config",
    "new_secret",
    "parse_scheduler_url",
    "plan_cluster",
    "scheduler_config",
    "server_config",
    "server_token",
    "toml_document",
]

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..untrusted import redact

MAX_SERVERS = 64
MAX_TOKEN = 4096
TomlValue = str | int | Mapping[str, "TomlValue"]


def new_secret() -> str:
    """32 random bytes, base64url without padding (a token, or a jwt_hs256 key)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def server_token(secret_key: str, server_addr: str) -> str:
    """The JWT that lets the server at `server_addr` (ip:port) register with the scheduler
    whose `server_auth` key is `secret_key`."""
    key = base64.urlsafe_b64decode(secret_key + "=" * (-len(secret_key) % 4))
    compact = {"separators": (",", ":")}
    header = _b64url(json.dumps({"typ": "JWT", "alg": "HS256"}, **compact).encode())  # type: ignore[arg-type]
    claims = _b64url(json.dumps({"exp": 0, "server_id": server_addr}, **compact).encode())  # type: ignore[arg-type]
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64url(signature)}"


def check_token(token: str, *, what: str) -> str:
    """`token` when it can be an HTTP header value sccache sends (visible ASCII, no space),
    else ConfigError naming `what` (where the token came from)."""
    if not token or len(token) > MAX_TOKEN or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise ConfigError(
            f"{what}: a client token is 1 to {MAX_TOKEN} visible ASCII characters with no "
            "space (an HTTP header value); `buildtools dist up` writes one, "
            "`sccache-dist auth generate-shared-token` makes one"
        )
    return token


def parse_scheduler_url(text: str, *, what: str = "--distribute") -> str:
    """The scheduler URL normalised (`http[s]://host[:port]`, no trailing slash), else
    ConfigError saying what is allowed."""
    allowed = "an http:// or https:// URL of the scheduler, e.g. http://127.0.0.1:10600"
    said = redact(text)  # what a refusal quotes: never a password it carries
    if any(ord(c) <= 0x20 or 0x7F <= ord(c) <= 0x9F for c in text):
        raise ConfigError(f"{what}: {said!r} has whitespace or a control character; {allowed}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{what}: {said!r} is not a URL ({exc}); {allowed}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what}: {said!r} is not {allowed}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{what}: {said!r} carries credentials; the client token goes in "
            "$BUILDTOOLS_DIST_TOKEN, never in the URL"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{what}: {said!r} has a path or query; {allowed}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def assign_cpus(servers: int, cores: int, allowed: Sequence[int]) -> list[tuple[int, ...]]:
    """The CPUs each server is pinned to: `cores` consecutive ones of `allowed`, wrapping
    when servers × cores exceed them (then servers share CPUs)."""
    pool = sorted(set(allowed))
    if not pool:
        raise ConfigError("no CPU is available to this process (sched_getaffinity is empty)")
    if cores > len(pool):
        raise ConfigError(
            f"--cores {cores}: this machine lets buildtools use {len(pool)} CPU(s); "
            f"give --cores 1 to {len(pool)}"
        )
    return [tuple(pool[(i * cores + j) % len(pool)] for j in range(cores)) for i in range(servers)]


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """One build server: its address, the CPUs it may use, where it keeps its files."""

    index: int
    addr: str  # ip:port, what clients connect to (its token is bound to it)
    cpus: tuple[int, ...]
    directory: Path  # config, toolchains, build dir and log

    @property
    def config(self) -> Path:
        return self.directory / "server.toml"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """Everything `dist up` writes before starting a process."""

    state_dir: Path
    scheduler_addr: str  # ip:port
    client_token: str
    server_key: str  # the scheduler's jwt_hs256 secret
    servers: tuple[ServerSpec, ...]

    @property
    def scheduler_url(self) -> str:
        return f"http://{self.scheduler_addr}"

    @property
    def scheduler_config(self) -> Path:
        return self.state_dir / "scheduler.toml"

    @property
    def scheduler_log(self) -> Path:
        return self.state_dir / "scheduler.log"


def plan_cluster(
    *,
    state_dir: Path,
    servers: int,
    cores: int,
    allowed_cpus: Sequence[int],
    ports: Sequence[int],
    host: str = "127.0.0.1",
    keys: tuple[str, str] | None = None,
) -> ClusterLayout:
    """The cluster `dist up` starts: the scheduler on `ports[0]`, server i on `ports[i+1]`,
    each server pinned to `cores` CPUs (its `num_cpus` as sccache counts it). `keys` (the
    client token and the servers' secret key) are made here unless given (tests)."""
    if not 1 <= servers <= MAX_SERVERS:
        raise ConfigError(f"--servers {servers}: give 1 to {MAX_SERVERS}")
    if cores < 1:
        raise ConfigError(f"--cores {cores}: give 1 or more")
    if len(ports) != servers + 1 or len(set(ports)) != len(ports):
        raise ValueError(f"{servers + 1} distinct ports needed, got {list(ports)}")
    cpus = assign_cpus(servers, cores, allowed_cpus)
    return ClusterLayout(
        state_dir=state_dir,
        scheduler_addr=f"{host}:{ports[0]}",
        client_token=keys[0] if keys else new_secret(),
        server_key=keys[1] if keys else new_secret(),
        servers=tuple(
            ServerSpec(
                index=i,
                addr=f"{host}:{ports[i + 1]}",
                cpus=cpus[i],
                directory=state_dir / f"server-{i}",
            )
            for i in range(servers)
        ),
    )


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for c in value:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return _toml_string(key)


def toml_document(table: Mapping[str, TomlValue], _prefix: str = "") -> str:
    """A TOML document of strings, integers and tables (nothing in a value can end its
    string or start a new key)."""
    lines: list[str] = []
    nested: list[tuple[str, Mapping[str, TomlValue]]] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            nested.append((key, value))
        elif isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TypeError(f"{key}: {type(value).__name__} is not written")
        else:
            shown = _toml_string(value) if isinstance(value, str) else str(value)
            lines.append(f"{_toml_key(key)} = {shown}")
    for key, sub in nested:
        name = f"{_prefix}{_toml_key(key)}"
        lines.append(f"\n[{name}]")
        lines.append(toml_document(sub, name + ".").rstrip("\n"))
    return "\n".join(line for line in lines if line) + "\n"


def scheduler_config(layout: ClusterLayout) -> str:
    """scheduler.toml: clients authenticate with the shared token, servers with a JWT."""
    return toml_document(
        {
            "public_addr": layout.scheduler_addr,
            "client_auth": {"type": "token", "token": layout.client_token},
            "server_auth": {"type": "jwt_hs256", "secret_key": layout.server_key},
        }
    )


def server_config(layout: ClusterLayout, server: ServerSpec, *, bwrap: Path) -> str:
    """server.toml of `server`: the overlay builder sandboxes each compile with bubblewrap."""
    return toml_document(
        {
            "cache_dir": str(server.directory / "toolchains"),
            "public_addr": server.addr,
            "scheduler_url": layout.scheduler_url,
            "builder": {
                "type": "overlay",
                "build_dir": str(server.directory / "build"),
                "bwrap_path": str(bwrap),
            },
            "scheduler_auth": {
                "type": "jwt_token",
                "token": server_token(layout.server_key, server.addr),
            },
        }
    )


def client_config(
    scheduler_url: str | None,
    token: str,
    *,
    toolchain_cache: Path,
    no_dist: Sequence[Path] = (),
) -> str:
    """The $SCCACHE_CONF of a build that distributes: Linux toolchains are packaged by
    sccache itself; `no_dist` names compiler paths whose units always compile here (the
    launcher's links for unoptimized units: `launcher`). With no `scheduler_url` sccache
    compiles every unit here."""
    if scheduler_url is None:
        return toml_document({"dist": {"cache_dir": str(toolchain_cache)}})
    text = toml_document(
        {
            "dist": {
                "scheduler_url": scheduler_url,
                "cache_dir": str(toolchain_cache),
                "auth": {"type": "token", "token": token},
            }
        }
    )
    for path in no_dist:
        text += (
            f'\n[[dist.toolchains]]\ntype = "no_dist"\n'
            f"compiler_executable = {_toml_string(str(path))}\n"
        )
    return text
