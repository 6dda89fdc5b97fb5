"""elf-machine: every shared object is built for the architecture the wheel's tag names.

pip picks a wheel by its platform tag alone, so an x86_64 `.so` in a wheel tagged
`manylinux_2_28_aarch64` installs on a Grace Hopper machine and fails at import with
"cannot open shared object file" or "wrong ELF class" — the reverse as well. A wheel built
under emulation, or repaired on the wrong host, or one whose build copied a prebuilt
object, is where this happens. The arch of each tag maps to an ELF `e_machine` through
`data/ecosystem.json` (`elf_machines`); grafted libraries are judged too: they are loaded
the same way.
"""

from __future__ import annotations

__all__ = ["CHECK", "ELF_MACHINE", "expected_machines"]

from ...ecosystem import load_ecosystem
from ...model import Finding
from ..meta import PlatformTag, WheelName
from .spec import Code, WheelCheck, WheelSubject, finding

ELF_MACHINE = Code(
    name="elf-machine",
    summary="a shared object built for another architecture than the platform tag names",
)


def expected_machines(tag_set: str) -> dict[str, str]:
    """ELF machine → wheel arch for each tag of a dotted tag set whose arch is known."""
    machines = load_ecosystem().elf_machines
    out: dict[str, str] = {}
    for tag in tag_set.split("."):
        try:
            arch = PlatformTag.parse(tag).arch
        except ValueError:
            continue  # 'any' or a non-Linux tag: no architecture to hold the binaries to
        if arch in machines:
            out[machines[arch]] = arch
    return out


def _arch_of(machine: str) -> str:
    names = {m: a for a, m in load_ecosystem().elf_machines.items()}
    return names.get(machine, machine)


def _check(subject: WheelSubject) -> list[Finding]:
    tag_set = WheelName.parse(subject.wheel.name).platform
    expected = expected_machines(tag_set)
    if not expected:
        return []
    wanted = "/".join(sorted(set(expected.values())))
    findings = []
    for elf in subject.elves:
        if elf.info.machine in expected:
            continue
        built_for = _arch_of(elf.info.machine)
        findings.append(
            finding(
                ELF_MACHINE,
                f"{elf.arcname} is a {built_for} binary in a wheel tagged {tag_set}: pip "
                f"installs it on {wanted} machines, where it cannot load. Build the "
                f"{wanted} cell on a {wanted} runner or under emulation "
                "(`buildtools build --only '<cell>' --backend docker`), not on this host's "
                "compiler.",
                path=elf.arcname,
                details=(f"ELF machine: {elf.info.machine}", f"tag needs: {wanted}"),
            )
        )
    return findings


CHECK = WheelCheck(name="machine", codes=(ELF_MACHINE,), run=_check)
