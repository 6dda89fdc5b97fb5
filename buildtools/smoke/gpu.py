"""A GPU smoke needs its GPU: what the runner's driver and torch see, and what a wheel covers.

A CUDA smoke that runs on a machine whose torch sees no device proves nothing about the
device code; the example's smoke falls back to its CPU cases and passes. So a runner declared
`cuda` or `rocm` is checked before anything is installed (`check_device`): the driver
(nvidia-smi, /proc/driver/nvidia/version; /dev/kfd and amdgpu for ROCm), then what the
runner's torch says (`torch.cuda.is_available()`, the device count, the CUDA version the
driver supports). A runner that fails it is `no-device` with its own exit code, and the one
line says what was checked and the likely cause.

A wheel whose device code does not run on the runner's GPU (no cubin of its arch, no PTX the
driver can JIT-compile) would fail with "no kernel image is available" at its first kernel;
smoke calls it `not-covered` before installing it (`device_coverage`), from the archs in its
ELF files (the facts the `no-device-code` check reads) and the GPUs torch reported.
"""

from __future__ import annotations

__all__ = [
    "Coverage",
    "DeviceCheck",
    "DriverFacts",
    "check_device",
    "device_coverage",
    "read_driver_facts",
]

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from ..process import ProcessRunner
from ..torchinstall import GpuInfo, TorchInstall
from ..wheel.archcoverage import device_code_runs
from ..wheel.checks.elves import WheelElf

DeviceKind = Literal["cuda", "rocm"]

_NVIDIA_PROC = "/proc/driver/nvidia/version"
_AMDGPU_VERSION = "/sys/module/amdgpu/version"
_NVRM_RE = re.compile(r"Kernel Module(?: for [A-Za-z0-9_]+)?\s+(?P<version>\d+(?:\.\d+)+)")
# variables that hide devices from the CUDA/HIP runtime
_VISIBLE_ENV = {
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
}


@dataclass(frozen=True, kw_only=True)
class DriverFacts:
    """What the machine says about its GPU driver, asked without torch."""

    kind: DeviceKind
    driver: str | None = None  # "580.159.04"; amdgpu's module version
    source: str | None = None  # where `driver` was read: nvidia-smi, /proc/…, /sys/…
    gpu_names: tuple[str, ...] = ()  # nvidia-smi's list
    device_nodes: tuple[str, ...] = ()  # /dev/nvidiactl, /dev/nvidia0, /dev/kfd present
    problem: str | None = None  # nvidia-smi's complaint when it ran and failed

    @property
    def present(self) -> bool:
        """True when anything shows a driver for this kind."""
        return self.driver is not None or bool(self.device_nodes)

    def describe(self) -> str:
        if self.driver is not None:
            nodes = f", {' '.join(self.device_nodes)}" if self.device_nodes else ", no device nodes"
            return f"driver {self.driver} ({self.source}{nodes})"
        if self.kind == "rocm":
            nodes = " ".join(self.device_nodes) or f"no /dev/kfd, no {_AMDGPU_VERSION}"
            return f"amdgpu: {nodes}"
        smi = f"nvidia-smi failed: {self.problem}" if self.problem else "no nvidia-smi"
        nodes = " ".join(self.device_nodes) or "no /dev/nvidia*"
        return f"no NVIDIA driver ({smi}, no {_NVIDIA_PROC}, {nodes})"


def read_driver_facts(
    kind: DeviceKind,
    *,
    runner: ProcessRunner,
    env: Mapping[str, str],
    which: Callable[[str], str | None],
    read_text: Callable[[str], str | None],
    list_dev: Callable[[], Sequence[str]],
) -> DriverFacts:
    """The driver as nvidia-smi, /proc and /dev show it (`read_text` None: unreadable)."""
    devs = sorted(list_dev())
    if kind == "rocm":
        nodes = tuple(f"/dev/{n}" for n in devs if n == "kfd")
        version = (read_text(_AMDGPU_VERSION) or "").strip() or None
        return DriverFacts(
            kind=kind,
            driver=version,
            source=_AMDGPU_VERSION if version else None,
            device_nodes=nodes,
        )
    nodes = tuple(f"/dev/{n}" for n in devs if re.fullmatch(r"nvidia(ctl|\d+)", n))
    problem = None
    smi = which("nvidia-smi")
    if smi:
        result = runner.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            env=env,
            capture=True,
            timeout=60,
        )
        rows = [ln for ln in result.output.strip().splitlines() if "," in ln]
        if result.ok and rows:
            names = tuple(r.rpartition(",")[0].strip() for r in rows)
            driver = rows[0].rpartition(",")[2].strip() or None
            return DriverFacts(
                kind=kind,
                driver=driver,
                source="nvidia-smi",
                gpu_names=names,
                device_nodes=nodes,
            )
        lines = [ln.strip() for ln in result.output.splitlines() if ln.strip()]
        problem = (lines[0][:200] if lines else f"exit {result.returncode}") or None
    m = _NVRM_RE.search(read_text(_NVIDIA_PROC) or "")
    if m:
        return DriverFacts(
            kind=kind, driver=m["version"], source=_NVIDIA_PROC, device_nodes=nodes, problem=problem
        )
    return DriverFacts(kind=kind, device_nodes=nodes, problem=problem)


# --------------------------------------------------------------------------- the gate


@dataclass(frozen=True, kw_only=True)
class DeviceCheck:
    """The verdict on a runner declared cuda/rocm: ok, what was checked, the likely cause."""

    ok: bool
    checked: str
    cause: str | None = None
    # True when the torch that smoke will use still has to be asked (a CPU torch on the
    # runner, each wheel's torch from an index): the driver alone passed
    deferred: bool = False

    def line(self) -> str:
        """One line for a person: what was checked, and (when failed) the likely cause."""
        if self.ok:
            return f"device check: {self.checked}"
        return f"no GPU visible: {self.checked}; likely cause: {self.cause}"


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def _describe_torch(torch: TorchInstall | None, python: Path | None) -> str:
    where = f" in {python}" if python else ""
    if torch is None:
        return f"no torch{where}"
    if not torch.imported:
        return f"torch {torch.version}{where} does not import ({torch.import_error or 'failed'})"
    build = f"CUDA {torch.cuda}" if torch.cuda else f"HIP {torch.hip}" if torch.hip else "CPU"
    said = (
        f"torch.cuda.is_available() {torch.device_available}, "
        f"device_count {torch.device_count if torch.device_count is not None else '?'}"
    )
    if torch.driver_cuda:
        said += f", the driver supports CUDA {torch.driver_cuda}"
    if torch.device_error:
        said += f", error: {torch.device_error[:200]}"
    return f"torch {torch.version} ({build}){where}: {said}"


def _hidden_by(kind: DeviceKind, env: Mapping[str, str]) -> str | None:
    for name in _VISIBLE_ENV[kind]:
        value = env.get(name)
        if value is not None and value.strip() in ("", "-1", "none", "NoDevFiles"):
            return f"{name}={value!r} hides every GPU from the runtime: unset it"
    return None


def _no_driver_cause(kind: DeviceKind) -> str:
    if kind == "rocm":
        return (
            "the container did not get the GPU (docker run --device /dev/kfd --device /dev/dri) "
            "or the amdgpu driver is not loaded on this runner"
        )
    return (
        "the container did not get the GPU (docker run --gpus all, the NVIDIA container "
        "toolkit) or this runner has no NVIDIA driver"
    )


def check_device(
    kind: DeviceKind,
    *,
    torch: TorchInstall | None,
    driver: DriverFacts,
    env: Mapping[str, str],
    torch_required: bool,
    python: Path | None = None,
) -> DeviceCheck:
    """Whether a runner declared `kind` can prove a wheel on its GPU.

    `torch` is what the runner's interpreter imports (asked for its devices). With
    `torch_required` (the smoke uses that torch) it must be a `kind` build that sees a
    device; otherwise a torch of another build defers the question to the torch each wheel
    is tested with, once the driver shows a GPU.
    """
    checked = f"{driver.describe()}; {_describe_torch(torch, python)}"
    same_kind = (
        torch is not None
        and bool(torch.imported)
        and bool(torch.cuda if kind == "cuda" else torch.hip)
    )
    if torch is not None and same_kind:
        if torch.device_available and (torch.device_count or 0) > 0:
            return DeviceCheck(ok=True, checked=checked)
        return DeviceCheck(ok=False, checked=checked, cause=_why_unseen(kind, torch, driver, env))
    if torch_required:
        if torch is None or not torch.imported:
            cause = (
                "the interpreter named by --torch-python (or $BUILDTOOLS_TORCH_PYTHON) has no "
                "torch that imports: point it at the runner's GPU torch, or let smoke install "
                "the cell's torch (--torch-source index)"
            )
        else:
            other = "a CPU" if not (torch.cuda or torch.hip) else "another accelerator's"
            cause = (
                f"the runner's torch is {other} build ({torch.version}) and cannot use a "
                f"{kind.upper()} GPU: install the cell's {kind.upper()} torch on the runner, or "
                "let smoke install it (--torch-source index)"
            )
        return DeviceCheck(ok=False, checked=checked, cause=cause)
    if not driver.present:
        return DeviceCheck(ok=False, checked=checked, cause=_no_driver_cause(kind))
    return DeviceCheck(ok=True, checked=checked, deferred=True)


def _why_unseen(
    kind: DeviceKind, torch: TorchInstall, driver: DriverFacts, env: Mapping[str, str]
) -> str:
    hidden = _hidden_by(kind, env)
    if hidden:
        return hidden
    if not driver.present:
        return _no_driver_cause(kind)
    if kind == "cuda":
        have, need = _version(torch.driver_cuda), _version(torch.cuda)
        if have is not None and need is not None and have < need:
            return (
                f"the driver ({driver.driver or 'version unknown'}) supports CUDA "
                f"{torch.driver_cuda}, older than the CUDA {torch.cuda} of torch and the wheel: "
                f"install a driver that supports CUDA {torch.cuda}"
            )
        if not any(re.fullmatch(r"/dev/nvidia\d+", n) for n in driver.device_nodes):
            return (
                "the driver is installed but no /dev/nvidia<N> device node is present: the "
                "container did not get the GPU (docker run --gpus all)"
            )
        return (
            f"the driver ({driver.driver or 'version unknown'}) may be older than torch's CUDA "
            f"{torch.cuda}, or the GPU is in a bad state (see nvidia-smi and dmesg)"
        )
    return (
        f"amdgpu is present but torch (HIP {torch.hip}) sees no GPU: the container lacks "
        "/dev/dri, the user is not in the render/video groups, or the ROCm driver is older "
        "than torch's"
    )


# --------------------------------------------------------------------------- coverage


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """Whether a wheel's device code runs on every GPU the runner's torch sees."""

    covered: bool
    detail: str  # per binary: what it carries and how it runs on each GPU


def _gpu_text(gpu: GpuInfo) -> str:
    """'GPU 0 (NVIDIA H100 80GB HBM3, sm_90)'."""
    return f"GPU {gpu.index} ({gpu.name}, {gpu.arch})"


def device_coverage(
    elves: Sequence[WheelElf],
    gpus: Sequence[GpuInfo],
    *,
    kind: DeviceKind,
    wheel_cuda: str | None,
    driver_cuda: str | None,
    optional: frozenset[str] = frozenset(),
) -> Coverage:
    """Does every binary with device code have a cubin (or PTX the driver JITs) per GPU?

    PTX counts only where the driver supports the wheel's CUDA: PTX from a newer toolkit
    than the driver's is rejected at load. A wheel of a GPU cell with no device code at all
    is not covered either. A binary in `optional` (the files of optional modules: torchao's
    Blackwell-only `_C_mxfp8` on a Hopper GPU) that does not run is noted, not counted.
    """
    label = "CUDA" if kind == "cuda" else "HIP"
    carriers = [
        (e, code)
        for e in elves
        if (code := (e.info.cuda if kind == "cuda" else e.info.hip)) is not None
    ]
    if not gpus:
        return Coverage(covered=False, detail="the runner's torch reported no GPU to compare")
    if not carriers:
        return Coverage(
            covered=False,
            detail=f"no binary in the wheel carries {label} device code (built CPU-only?)",
        )
    too_old = None
    have, need = _version(driver_cuda), _version(wheel_cuda)
    if kind == "cuda" and have is not None and need is not None and have < need:
        too_old = (
            f"PTX of CUDA {wheel_cuda}, which a driver supporting CUDA {driver_cuda} cannot JIT"
        )
    problems: list[str] = []
    notes: list[str] = []
    for elf, code in carriers:
        archs = ", ".join(sorted(code.archs)) or "nothing readable"
        for gpu in gpus:
            runs = device_code_runs(code, gpu)
            if runs == "native":
                notes.append(f"{elf.arcname}: cubin for {_gpu_text(gpu)}")
            elif runs == "ptx" and too_old is None:
                notes.append(f"{elf.arcname}: PTX JIT-compiled for {_gpu_text(gpu)} ({archs})")
            else:
                why = too_old if runs == "ptx" else f"carries {archs}"
                unread = "" if code.complete else "; part of its device code could not be read"
                text = f"{elf.arcname} has no device code for {_gpu_text(gpu)}: {why}{unread}"
                if elf.arcname in optional:
                    notes.append(f"{text} (an optional module)")
                else:
                    problems.append(text)
    if problems:
        return Coverage(
            covered=False,
            detail="; ".join(problems)
            + " (its kernels would fail with 'no kernel image is available for execution on "
            "the device'; add the arch to the cell's arch_list)",
        )
    return Coverage(covered=True, detail="; ".join(notes))
