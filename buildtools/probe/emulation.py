"""Whether this machine can run another architecture's programs: QEMU user emulation.

An aarch64 wheel (Grace Hopper, Grace Blackwell) built on an x86_64 machine compiles in an
aarch64 container whose programs the kernel hands to `qemu-aarch64` through a binfmt_misc
handler. Docker needs the handler registered with the F ("fix binary") flag, so that the
interpreter is opened at registration and found from inside the container's filesystem;
Debian/Ubuntu's `qemu-user-static` package registers it so, as does the usual
privileged registration image. Pure: reads the handler files it is pointed at.
"""

from __future__ import annotations

__all__ = [
    "BINFMT_DIR",
    "Emulation",
    "emulation_for",
    "setup_commands",
]

from dataclasses import dataclass
from pathlib import Path

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# uname -m of the wheel platform → the binfmt handler qemu-user-static registers for it
_HANDLERS = {"aarch64": "qemu-aarch64", "x86_64": "qemu-x86_64"}
_APT = "apt-get install -y qemu-user-static binfmt-support"
_MOUNT = "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc"


@dataclass(frozen=True, kw_only=True)
class Emulation:
    """Whether programs of `machine` run here, and what to do when they do not."""

    machine: str  # 'aarch64'
    native: bool  # the host is that machine: nothing to emulate
    handler: Path | None  # the binfmt_misc handler file, where one is registered
    ok: bool
    reason: str  # why not, or how ('native', 'qemu-aarch64 (flags: PF)')

    @property
    def remedy(self) -> str:
        """The exact commands that register the handler (as root, Debian/Ubuntu)."""
        name = _HANDLERS.get(self.machine, f"qemu-{self.machine}")
        return (
            f"register QEMU for {self.machine} (as root, Debian/Ubuntu): {_APT}; then, where "
            f"{BINFMT_DIR} is empty, {_MOUNT} && update-binfmts --enable {name}. Elsewhere: "
            "docker run --privileged --rm tonistiigi/binfmt --install arm64. Or let "
            "buildtools do the Debian/Ubuntu steps: buildtools build --setup-emulation"
        )


def _flags(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("flags:"):
            return line.partition(":")[2].strip()
    return ""


def emulation_for(machine: str, *, host_machine: str, binfmt_dir: Path = BINFMT_DIR) -> Emulation:
    """Can this host run `machine`'s programs (natively, or through a binfmt handler)?"""
    if machine == host_machine:
        return Emulation(machine=machine, native=True, handler=None, ok=True, reason="native")
    name = _HANDLERS.get(machine, f"qemu-{machine}")
    if not (binfmt_dir / "register").exists():
        return Emulation(
            machine=machine,
            native=False,
            handler=None,
            ok=False,
            reason=f"binfmt_misc is not mounted at {binfmt_dir}",
        )
    path = binfmt_dir / name
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Emulation(
            machine=machine,
            native=False,
            handler=None,
            ok=False,
            reason=f"no binfmt handler for {machine} ({path} is missing)",
        )
    enabled = text.splitlines()[:1] == ["enabled"]
    flags = _flags(text)
    if not enabled:
        reason, ok = f"{path} is registered but disabled", False
    elif "F" not in flags:
        reason, ok = (
            f"{path} lacks the F flag (flags: {flags or 'none'}): containers cannot find "
            "the interpreter; re-register it with qemu-user-static's handler",
            False,
        )
    else:
        reason, ok = f"{name} (flags: {flags})", True
    return Emulation(machine=machine, native=False, handler=path, ok=ok, reason=reason)


def setup_commands(machine: str, *, binfmt_dir: Path = BINFMT_DIR) -> list[list[str]]:
    """What `--setup-emulation` runs as root on Debian/Ubuntu, in order (each idempotent)."""
    name = _HANDLERS.get(machine, f"qemu-{machine}")
    commands = [
        ["apt-get", "install", "-y", "-qq", "qemu-user-static", "binfmt-support"],
    ]
    if not (binfmt_dir / "register").exists():
        commands.append(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt_dir)])
    commands.append(["update-binfmts", "--enable", name])
    return commands
