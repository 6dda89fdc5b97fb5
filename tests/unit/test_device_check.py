"""The device check's arch truth on real device code: the archs a cell promises against the
cubins, PTX and gfx targets each shared object of its wheel carries, both ways.

The objects are nvcc 13.0 and clang 15 output (tests/fixtures/cuda/, made by
make_fixtures.sh and listed in README.md there). Their sizes below are the fatbin entries'
(64-byte header + payload) and the offload bundle's code objects, as
`clang-offload-bundler --unbundle` writes them.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from fixtures.crafted import make_site_packages, make_wheel

from buildtools.cli.check import cmd_check
from buildtools.model import Finding, Severity
from buildtools.wheel.checks import Expectation, check_wheel

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
SO = "ext_ok/_C.cpython-312-x86_64-linux-gnu.so"
OTHER = "ext_ok/_ops.cpython-312-x86_64-linux-gnu.so"
DEVICE_CODES = {"no-device-code", "extra-device-code"}
ENFORCE = "accelerators.cu130.arch_flags: enforce"


def _wheel(tmp_path: Path, objects: dict[str, str]) -> Path:
    """A wheel whose shared objects (path in the wheel → fixture file) are real objects."""
    files = {arcname: (FIXTURES / fixture).read_bytes() for arcname, fixture in objects.items()}
    return make_wheel(tmp_path, files=files)


def _device(wheel: Path, arch_list: str, accelerator: str = "cu130") -> list[Finding]:
    expect = Expectation(accelerator=accelerator, arch_list=arch_list, build_record=False)
    return [f for f in check_wheel(wheel, targets=[], expect=expect) if f.code in DEVICE_CODES]


def test_the_promised_archs_exactly_pass(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so"})
    assert _device(wheel, "8.0;9.0") == []
    assert _device(wheel, "8.0 9.0") == []  # the separators TORCH_CUDA_ARCH_LIST accepts


def test_an_arch_beyond_the_promise_is_a_warning_with_its_bytes_and_object(
    tmp_path: Path,
) -> None:
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so"})
    [extra] = _device(wheel, "8.0")
    assert extra.code == "extra-device-code"
    assert extra.severity is Severity.WARNING
    assert extra.path == wheel.name
    assert extra.message.startswith(
        "The wheel carries CUDA device code TORCH_CUDA_ARCH_LIST='8.0' did not promise, "
        f"3768 bytes in all: {SO} carries cubin sm_90 (3768 bytes). "
    )
    assert "accelerators.cu130.arch_list" in extra.message and ENFORCE in extra.message
    assert extra.details == (f"{SO}: sm_90 3768 bytes",)


def test_under_enforce_an_arch_beyond_the_promise_is_an_error_naming_the_bypass(
    tmp_path: Path,
) -> None:
    """The wrapper was to build the list alone: extra code means a compile it never saw."""
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so"})
    expect = Expectation(
        accelerator="cu130", arch_list="8.0", build_record=False, arch_flags="enforce"
    )
    [extra] = [f for f in check_wheel(wheel, targets=[], expect=expect) if f.code in DEVICE_CODES]
    assert (extra.code, extra.severity) == ("extra-device-code", Severity.ERROR)
    assert extra.message.startswith("accelerators.cu130.arch_flags is enforce, yet the wheel")
    assert "use_ninja=False" in extra.message and "sm_90 (3768 bytes)" in extra.message
    assert _device(wheel, "8.0;9.0") == []  # the promise met: nothing, enforce or not


def test_missing_ptx_is_an_error_that_says_ptx(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so"})
    [missing] = _device(wheel, "8.0;9.0+PTX")
    assert missing.code == "no-device-code"
    assert missing.severity is Severity.ERROR
    assert (
        f"promised: {SO} lacks PTX compute_90 (it carries cubin sm_80 sm_90, no PTX). "
        in missing.message
    )
    assert "without the promised PTX, so do GPUs newer than the newest cubin" in missing.message
    assert "Likely cause: the project passes its own arch flags" in missing.message
    assert "Set accelerators.cu130.arch_list to what the project really builds" in (missing.message)
    assert ENFORCE in missing.message
    assert missing.details == (f"{SO} missing: compute_90", f"{SO} found: sm_80 sm_90")


def test_a_missing_cubin_is_an_error_naming_what_is_there(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so"})
    [missing, extra] = _device(wheel, "7.5;8.0;10.0")
    assert (missing.code, missing.severity) == ("no-device-code", Severity.ERROR)
    assert f"{SO} lacks cubin sm_75 sm_100 (it carries cubin sm_80 sm_90, no PTX)" in (
        missing.message
    )
    # the project's own list shows up both ways: sm_90 was built though not promised
    assert (extra.code, extra.severity) == ("extra-device-code", Severity.WARNING)
    assert extra.details == (f"{SO}: sm_90 3768 bytes",)


def test_arch_specific_and_family_variants_are_promises_of_their_own(tmp_path: Path) -> None:
    """sm_90a and sm_100f meet 9.0a and 10.0f, and neither the plain 9.0 nor 10.0."""
    wheel = _wheel(tmp_path, {SO: "kernel_sm90a_sm100f_sm120_compute120.o"})
    assert _device(wheel, "9.0a;10.0f;12.0+PTX") == []
    [missing, extra] = _device(wheel, "9.0;10.0;12.0+PTX")
    assert missing.severity is Severity.ERROR
    assert f"{SO} lacks cubin sm_90 sm_100 (it carries cubin sm_90a sm_100f sm_120, " in (
        missing.message
    )
    assert "sm_90a is not sm_90: an arch-specific (a) or family (f) variant" in missing.message
    assert "sm_100f is not sm_100" in missing.message
    assert extra.details == (f"{SO}: sm_90a 3768 bytes", f"{SO}: sm_100f 5472 bytes")
    # and the other way round: a plain cubin does not meet an arch-specific promise
    plain = _wheel(tmp_path / "plain", {SO: "ext_sm80_sm90.so"})
    [missing, extra] = _device(plain, "8.0;9.0a")
    assert f"{SO} lacks cubin sm_90a (it carries cubin sm_80 sm_90, no PTX; sm_90 is not " in (
        missing.message
    )
    assert extra.details == (f"{SO}: sm_90 3768 bytes",)


def test_compressed_device_code_is_sized_as_stored_and_said_compressed(tmp_path: Path) -> None:
    """nvcc compresses PTX by default and cubins under --compress-mode=size (Zstd)."""
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90_zstd.so"})
    assert _device(wheel, "8.0;9.0") == []
    [extra] = _device(wheel, "8.0")
    assert f"{SO} carries cubin sm_90 (1016 bytes compressed, 3704 inflated)" in extra.message
    ptx = _wheel(tmp_path / "ptx", {SO: "kernel_sm75_sm80_compute90.o"})
    [extra] = _device(ptx, "7.5;8.0")
    assert f"{SO} carries PTX compute_90 (432 bytes compressed, 638 inflated)" in extra.message


def test_each_shared_object_is_held_to_the_promise(tmp_path: Path) -> None:
    """One object built for the list and one with its own archs: the second is named."""
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so", OTHER: "kernel_sm75_sm80_compute90.o"})
    [missing, extra] = _device(wheel, "8.0;9.0")
    assert f"{OTHER} lacks cubin sm_90 (it carries cubin sm_75 sm_80, PTX compute_90)" in (
        missing.message
    )
    assert SO not in missing.message
    assert missing.details == (f"{OTHER} missing: sm_90", f"{OTHER} found: sm_75 sm_80 compute_90")
    assert extra.message.startswith(
        "The wheel carries CUDA device code TORCH_CUDA_ARCH_LIST='8.0;9.0' did not promise, "
        f"3608 bytes in all: {OTHER} carries cubin sm_75 (3176 bytes), PTX compute_90 "
        "(432 bytes compressed, 638 inflated). "
    )


def test_a_grafted_library_is_not_the_projects_device_code(tmp_path: Path) -> None:
    grafted = "ext_ok.libs/libkernels-1a2b3c4d.so"
    wheel = _wheel(tmp_path, {SO: "ext_sm80_sm90.so", grafted: "kernel_sm75_sm80_compute90.o"})
    assert _device(wheel, "8.0;9.0") == []


def test_rocm_targets_both_ways(tmp_path: Path) -> None:
    """clang's offload bundle (kernel.hip for gfx90a and gfx1030), sized per code object."""
    wheel = _wheel(tmp_path, {SO: "ext_gfx90a_gfx1030.so"})
    assert _device(wheel, "gfx90a;gfx1030", accelerator="rocm6.4") == []
    [missing, extra] = _device(wheel, "gfx90a;gfx942", accelerator="rocm6.4")
    assert missing.severity is Severity.ERROR
    assert "PYTORCH_ROCM_ARCH='gfx90a;gfx942' promised" in missing.message
    assert f"{SO} lacks target gfx942 (it carries target gfx90a gfx1030)" in missing.message
    assert "remove the project's own --offload-arch flags (arch_flags: enforce wraps nvcc" in (
        missing.message
    )
    assert "accelerators.rocm6.4.arch_flags" not in missing.message + extra.message
    assert extra.severity is Severity.WARNING
    assert f"{SO} carries target gfx1030 (3664 bytes)" in extra.message
    assert extra.details == (f"{SO}: gfx1030 3664 bytes",)


def _check_command(wheel: Path, site: Path, arch_list: str, *, json: bool) -> str:
    """What `buildtools check --accelerator cu130 --arch-list ARCH_LIST` prints."""
    args = argparse.Namespace(
        wheels=[wheel],
        torch_sites=[site],
        accelerator="cu130",
        arch_list=arch_list,
        platform_tag=None,
        weaker_platform_tag="error",
        local_version=None,
        requires_torch=None,
        no_build_record=True,
        json=json,
    )
    out = io.StringIO()
    cmd_check(args, out)
    return out.getvalue()


def test_buildtools_check_reports_the_device_code_both_ways(tmp_path: Path) -> None:
    """The check runs in `buildtools check`, as in every build (both call check_wheel).

    The fake CPU torch leaves the object's libcudart symbols undefined (errors of their
    own), so the device findings are read from the JSON report."""
    wheel = _wheel(tmp_path / "w", {SO: "ext_sm80_sm90.so"})
    site = make_site_packages(tmp_path / "site")

    def device(arch_list: str) -> list[tuple[str, str]]:
        report = json.loads(_check_command(wheel, site, arch_list, json=True))
        findings = report[wheel.name]
        return [(f["code"], f["severity"]) for f in findings if f["code"] in DEVICE_CODES]

    assert device("8.0;9.0") == []
    assert device("8.0") == [("extra-device-code", "warning")]
    assert device("8.0;9.0+PTX") == [("no-device-code", "error")]
    text = _check_command(wheel, site, "8.0", json=False)
    assert "\n  warning extra-device-code: The wheel carries CUDA device code " in text
    assert f"\n            {SO}: sm_90 3768 bytes\n" in text


def test_a_jobs_expectation_carries_its_arch_flags_setting() -> None:
    from dataclasses import replace

    from fixtures.factories import make_job

    job = make_job(accelerator="cu130", python="3.12", arch_list="9.0")
    assert job.toolkit is not None
    assert Expectation.of(None, job=job).arch_flags == "keep"
    enforced = replace(job, toolkit=replace(job.toolkit, arch_flags="enforce"))
    assert Expectation.of(None, job=enforced).arch_flags == "enforce"
