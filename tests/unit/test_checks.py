"""Static wheel checks (buildtools.wheel.checks) on crafted wheels: what the job promised
(Expectation), the torch it was built against (TorchTarget), and each check's finding."""

from __future__ import annotations

import fnmatch
import io
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest
from fixtures.crafted import (
    C10_ERROR_CXX11,
    C10_ERROR_OLD,
    FATBIN_ELF,
    FATBIN_PTX,
    Undef,
    fatbin,
    make_site_packages,
    make_so,
    make_wheel,
    offload_bundle,
)
from fixtures.factories import built_record, make_job
from fixtures.fakes import FakeRunner
from fixtures.probe import imported_report, probe_output, static_report

from buildtools.cli.check import cmd_check
from buildtools.errors import ExitCode
from buildtools.knowledge import load_knowledge
from buildtools.model import AbiMode, BuildRecord, Finding, Severity
from buildtools.wheel import checks
from buildtools.wheel.checks import (
    CHECK_CODES,
    CHECKS,
    Expectation,
    TorchTarget,
    check_binaries,
    check_wheel,
    expected_archs,
    has_errors,
    load_torch_target,
)
from buildtools.wheel.checks.abi import ABI_MISMATCH
from buildtools.wheel.checks.spec import BinaryCheck, Subject
from buildtools.wheel.elf import inspect_elf
from buildtools.wheel.meta import BUILD_RECORD_NAME, relabel_wheel
from buildtools.wheel.repair import derive_excludes

EXT = "ext_ok.cpython-311-x86_64-linux-gnu.so"
UNDEFINED = "_ZN3c1023definitely_not_in_torchEi"
STRING_CXX11 = "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm"
TORCH_EXPORTS = ("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE",)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- expectations and targets ----------------------------------------------------------------


def test_expected_archs() -> None:
    assert expected_archs("7.5;8.0;9.0;12.0+PTX", "cuda") == {
        "sm_75",
        "sm_80",
        "sm_90",
        "sm_120",
        "compute_120",
    }
    assert expected_archs("9.0a 10.0f+PTX", "cuda") == {"sm_90a", "sm_100f", "compute_100f"}
    assert expected_archs("gfx90a;gfx942:xnack+", "rocm") == {"gfx90a", "gfx942"}
    with pytest.raises(ValueError, match="'Ampere' in 'Ampere' is not a CUDA arch"):
        expected_archs("Ampere", "cuda")
    with pytest.raises(ValueError, match="not a ROCm arch"):
        expected_archs("8.0", "rocm")


def test_load_torch_target(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "a", version="2.11.0+cu130", cuda="13.0")
    target = load_torch_target(site)
    assert target == TorchTarget(
        version="2.11.0+cu130", site_packages=site.resolve(), cuda="13.0", cxx11_abi=True
    )
    old = make_site_packages(tmp_path / "b", version="2.5.1+cu124", cuda="12.4", cxx11_abi=False)
    assert load_torch_target(old).cxx11_abi is False


def test_load_torch_target_asks_torch_when_version_py_is_unreadable(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "venv/lib/python3.12/site-packages", version="x")
    (site / "torch" / "version.py").write_text("__version__ = get_version()\n")
    python = tmp_path / "venv/bin/python"
    out = probe_output(
        static_report(python, torch_version="x"),
        imported_report(site / "torch", version="2.12.0+rocm7.1", hip="7.1"),
    )
    runner = FakeRunner().on(str(python), "-c", output=out)
    target = load_torch_target(site, runner=runner)
    (call,) = runner.calls
    assert "--import-torch" in call.argv
    assert (target.version, target.cuda, target.hip) == (
        "2.12.0+rocm7.1",
        None,
        "7.1",
    )


def test_load_torch_target_without_torch(tmp_path: Path) -> None:
    from buildtools.errors import ToolchainError

    with pytest.raises(ToolchainError, match=r"no readable torch/version\.py"):
        load_torch_target(tmp_path)


def test_the_builds_expectation_is_its_record_and_its_job() -> None:
    """What the build checks its wheel against: the record it wrote (as `check` reads it
    back), with the local label and arch_flags only the job knows."""
    job = make_job(torch="2.11.0", accelerator="cu130", arch_list="8.0;9.0+PTX")
    record = BuildRecord.for_job(
        job,
        torch="2.11.0+cu130",
        cxx11_abi=True,
        python="3.12.3",
        device_runtime="13.0",
        fingerprint=None,
        source_fingerprint="0" * 64,
    )
    record = replace(record, weaker_platform_tag="warning")
    assert Expectation.of(record, job=job) == Expectation(
        accelerator="cu130",
        arch_list="8.0;9.0+PTX",
        platform_tag="manylinux_2_28_x86_64",
        weaker_platform_tag="warning",
        local_version="pt211cu130",
        requires_dist_torch="torch==2.11.*",
        cells=job.cell_ids,
        abi="per-python",
    )
    # `buildtools check` of that wheel: the same promise, less what only the job knows
    assert Expectation.of(record) == replace(Expectation.of(record, job=job), local_version=None)
    assert Expectation.of(None) == Expectation()  # no record: a CPU wheel, nothing promised


# --- check_wheel -------------------------------------------------------------------------------

CLEAN_UNDEFINED = [
    *TORCH_EXPORTS,
    C10_ERROR_CXX11,
    Undef("memcpy", "GLIBC_2.14", "libc.so.6"),
    Undef(STRING_CXX11, "GLIBCXX_3.4.21", "libstdc++.so.6"),
    Undef("_Unwind_Resume", "GCC_3.0", "libgcc_s.so.1"),
    "PyModule_Create2",
    "_Py_NoneStruct",
    Undef("__cxa_finalize", "GLIBC_2.2.5", "libc.so.6", weak=True),
]
CPU = Expectation(
    accelerator="cpu",
    platform_tag="manylinux_2_28_x86_64",
    local_version="pt213cpu",
    requires_dist_torch="torch==2.13.*",
)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site_packages(tmp_path / "site", torch_exports=TORCH_EXPORTS)


@pytest.fixture
def target(site: Path) -> TorchTarget:
    return load_torch_target(site)


def wheel_with(
    tmp_path: Path,
    files: dict[str, bytes],
    *,
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    accelerator: str = "cpu",
    local: str = "pt213cpu",
    relabel: bool = True,
) -> Path:
    raw = make_wheel(tmp_path / "raw", tag=tag, files=files)
    if not relabel:
        return raw
    record = built_record(make_job(accelerator=accelerator, python="3.11"), torch="2.13.0+cpu")
    return relabel_wheel(
        raw,
        out_dir=tmp_path / "wheels",
        local_version=local,
        requires_dist_torch="torch==2.13.*",
        build_record=record,
    )


def ext(**kwargs: object) -> bytes:
    kwargs.setdefault("needed", ["libc10.so", "libtorch_cpu.so", "libstdc++.so.6", "libc.so.6"])
    kwargs.setdefault("undefined", CLEAN_UNDEFINED)
    kwargs.setdefault("exports", ["PyInit_ext_ok"])
    return make_so(**kwargs)  # type: ignore[arg-type]


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def test_clean_wheel_has_no_findings(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext()})
    assert check_wheel(wheel, targets=[target], expect=CPU) == []


def test_bundled_torch_lib(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(
        tmp_path,
        {
            EXT: ext(needed=["libc10-bd5b4540.so"]),
            "ext_ok.libs/libc10-bd5b4540.so": make_so(
                soname="libc10-bd5b4540.so", exports=[C10_ERROR_CXX11]
            ),
            "ext_ok.libs/libcudart-1a2b3c4d.so.13": make_so(soname="libcudart-1a2b3c4d.so.13"),
            "ext_ok.libs/libz-0a1b2c3d.so.1": make_so(soname="libz-0a1b2c3d.so.1"),
            # the package's own library with a torch-like name is not a graft
            "ext_ok/libtorchfoo.so": make_so(soname="libtorchfoo.so"),
        },
    )
    findings = [f for f in check_wheel(wheel, targets=[target], expect=CPU)]
    bundled = [f for f in findings if f.code == "bundled-torch-lib"]
    assert [f.path for f in bundled] == [
        "ext_ok.libs/libc10-bd5b4540.so",
        "ext_ok.libs/libcudart-1a2b3c4d.so.13",
    ]
    c10 = bundled[0]
    assert c10.severity is Severity.ERROR
    assert c10.message.startswith(
        "The wheel bundles libc10.so (as ext_ok.libs/libc10-bd5b4540.so), which torch "
        "2.13.0+cpu already provides: a second libtorch in one process aborts at import"
    )
    assert "--exclude 'libc10.so'" in c10.message
    assert "second CUDA/ROCm runtime" in bundled[1].message
    assert "the target torch's runtime" in bundled[1].message
    # symbols the bundled copy exports still count as provided
    assert "undefined-symbol" not in codes(findings)


def test_undefined_symbol_is_demangled(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext(undefined=[*CLEAN_UNDEFINED, UNDEFINED])})
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert codes(findings) == ["undefined-symbol"]
    (f,) = findings
    assert f.path == EXT
    assert f.message == (
        f"{EXT} needs c10::definitely_not_in_torch(int), which torch 2.13.0+cpu does not "
        "export: importing it there fails with 'undefined symbol'. Build against the torch "
        "this wheel targets, or avoid this API (it is not in that torch version)."
    )
    assert f.details == (f"mangled: {UNDEFINED}", "missing from: torch 2.13.0+cpu")


def test_undefined_symbol_names_the_torch_that_lacks_it(tmp_path: Path) -> None:
    new = load_torch_target(
        make_site_packages(
            tmp_path / "new", version="2.11.0+cpu", torch_exports=[*TORCH_EXPORTS, UNDEFINED]
        )
    )
    old = load_torch_target(
        make_site_packages(tmp_path / "old", version="2.10.0+cpu", torch_exports=TORCH_EXPORTS)
    )
    wheel = wheel_with(tmp_path, {EXT: ext(undefined=[*CLEAN_UNDEFINED, UNDEFINED])})
    findings = check_wheel(wheel, targets=[new, old], expect=CPU)
    assert [f.details for f in findings] == [
        (f"mangled: {UNDEFINED}", "missing from: torch 2.10.0+cpu")
    ]
    assert "which torch 2.10.0+cpu does not export" in findings[0].message


def test_symbol_from_another_library_in_the_wheel(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(
        tmp_path,
        {
            EXT: ext(undefined=[*CLEAN_UNDEFINED, "helper_fn"], needed=["libhelper.so"]),
            "ext_ok/libhelper.so": make_so(soname="libhelper.so", exports=["helper_fn"]),
        },
    )
    assert check_wheel(wheel, targets=[target], expect=CPU) == []


def test_symbol_versions_beyond_the_tag(tmp_path: Path, target: TorchTarget) -> None:
    too_new = [*CLEAN_UNDEFINED, Undef("__libc_single_threaded", "GLIBC_2.32", "libc.so.6")]
    wheel = wheel_with(tmp_path, {EXT: ext(undefined=too_new)})
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert codes(findings) == ["platform-tag"]
    assert findings[0].message.startswith(
        f"{EXT} needs GLIBC_2.32, newer than manylinux_2_28_x86_64 allows"
    )
    assert findings[0].details == ("GLIBC_2.32: __libc_single_threaded",)
    # GLIBCXX_3.4.21 (gcc 5) is beyond manylinux2014's libstdc++ (3.4.19)
    old = wheel_with(tmp_path / "o", {EXT: ext()}, tag="cp311-cp311-manylinux2014_x86_64")
    findings = check_wheel(old, targets=[target], expect=CPU)
    assert codes(findings) == ["platform-tag"]
    assert "needs GLIBCXX_3.4.21, newer than manylinux2014_x86_64 allows" in findings[0].message
    # an untagged wheel promises nothing about glibc
    linux = wheel_with(
        tmp_path / "l", {EXT: ext(undefined=too_new)}, tag="cp311-cp311-linux_x86_64"
    )
    assert check_wheel(linux, targets=[target], expect=replace(CPU, platform_tag=None)) == []


def test_no_device_code_for_a_cuda_cell(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext()}, accelerator="cu130")
    expect = replace(CPU, accelerator="cu130", arch_list="8.0;9.0")
    findings = check_wheel(wheel, targets=[target], expect=expect)
    assert codes(findings) == ["no-device-code"]
    assert findings[0].message.startswith(
        "No .so in this cu130 wheel contains CUDA device code: it was built CPU-only"
    )
    assert "torch.cuda.is_available()" in findings[0].message
    assert "FORCE_CUDA=1" in findings[0].message


def test_missing_promised_archs(tmp_path: Path, target: TorchTarget) -> None:
    code = fatbin([(FATBIN_ELF, 80, 0), (FATBIN_ELF, 90, 0)])
    wheel = wheel_with(tmp_path, {EXT: ext(sections={".nv_fatbin": code})}, accelerator="cu130")
    expect = replace(CPU, accelerator="cu130", arch_list="8.0;9.0;12.0+PTX")
    findings = check_wheel(wheel, targets=[target], expect=expect)
    assert codes(findings) == ["no-device-code"]
    assert findings[0].message.startswith(
        "The wheel's CUDA device code is not what TORCH_CUDA_ARCH_LIST='8.0;9.0;12.0+PTX' "
        f"promised: {EXT} lacks cubin sm_120, PTX compute_120 (it carries cubin sm_80 sm_90, "
        "no PTX)"
    )
    ok = replace(CPU, accelerator="cu130", arch_list="8.0;9.0")
    assert check_wheel(wheel, targets=[target], expect=ok) == []


def test_rocm_cell(tmp_path: Path, target: TorchTarget) -> None:
    code = offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx90a"])
    wheel = wheel_with(tmp_path, {EXT: ext(sections={".hip_fatbin": code})}, accelerator="rocm6.4")
    expect = replace(CPU, accelerator="rocm6.4", arch_list="gfx90a;gfx942")
    findings = check_wheel(wheel, targets=[target], expect=expect)
    assert codes(findings) == ["no-device-code"]
    assert "PYTORCH_ROCM_ARCH='gfx90a;gfx942' promised" in findings[0].message
    assert "lacks target gfx942 (it carries target gfx90a)" in findings[0].message


def test_cpu_cell_linking_cuda(tmp_path: Path, target: TorchTarget) -> None:
    so = ext(needed=["libc10.so", "libc10_cuda.so", "libcudart.so.13", "libc.so.6"])
    wheel = wheel_with(tmp_path, {EXT: so})
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert codes(findings) == ["cpu-links-cuda"]
    assert findings[0].message.startswith(
        f"{EXT} of a CPU cell needs libc10_cuda.so, libcudart.so.13: it cannot load with a CPU torch"
    )


@pytest.mark.parametrize(
    ("needed", "flagged"),
    [
        ("libcublas.so.13", True),
        ("libtorch_cuda_linalg.so", True),
        ("libtorch_hip.so", True),
        ("libamdhip64.so.6", True),
        ("libnvidia-ml.so.1", True),
        ("libcudart-1a2b3c4d.so.13", True),  # a grafted runtime is still the runtime
        ("libtorch_cpu.so", False),
        ("libgomp.so.1", False),
    ],
)
def test_cpu_cell_needs_follow_the_never_bundle_groups(
    tmp_path: Path, target: TorchTarget, needed: str, flagged: bool
) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext(needed=["libc10.so", needed, "libc.so.6"])})
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert ("cpu-links-cuda" in codes(findings)) is flagged


def test_abi_mismatch(tmp_path: Path, site: Path) -> None:
    old_abi = [u for u in CLEAN_UNDEFINED if u != C10_ERROR_CXX11 and not isinstance(u, Undef)]
    wheel = wheel_with(tmp_path, {EXT: ext(undefined=[*old_abi, C10_ERROR_OLD])})
    target = load_torch_target(site)
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert "abi-mismatch" in codes(findings)
    f = next(f for f in findings if f.code == "abi-mismatch")
    assert f.message.startswith(
        f"{EXT} uses the pre-cxx11 std::string ABI but torch 2.13.0+cpu is built with the cxx11 ABI"
    )
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in f.message
    # the same symbol is also undefined against a cxx11 torch
    assert "undefined-symbol" in codes(findings)


def test_metadata_local_version_and_record(tmp_path: Path, target: TorchTarget) -> None:
    raw = wheel_with(tmp_path, {EXT: ext()}, relabel=False)
    findings = check_wheel(raw, targets=[target], expect=CPU)
    assert codes(findings) == ["metadata-pin", "local-version", "build-record"]
    pin, local, record = findings
    assert pin.message.startswith(
        f"{raw.name} has no Requires-Dist on torch (torch==2.13.*): pip may pair it with any torch"
    )
    assert local.message.startswith(
        f"{raw.name} has version 0.1.0, without the local label +pt213cpu the job promised"
    )
    assert record.message.startswith(
        f"{raw.name} has no build record (<dist-info>/buildtools.json)"
    )

    relabeled = wheel_with(tmp_path / "r", {EXT: ext()}, local="pt211cpu")
    other = replace(CPU, requires_dist_torch="torch==2.11.*", local_version="pt211cpu")
    findings = check_wheel(relabeled, targets=[target], expect=other)
    assert codes(findings) == ["metadata-pin"]
    assert "requires torch==2.13.*, not torch==2.11.* as the job promised" in findings[0].message
    # the same requirement spelled differently is the same pin
    spaced = replace(CPU, requires_dist_torch="torch ==2.13.*", local_version="pt211cpu")
    assert check_wheel(relabeled, targets=[target], expect=spaced) == []


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (b"{not json", "unreadable"),
        (b'{"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu"}', "cxx11_abi: missing"),
        (
            b'{"schema": 1, "torch": "2.13.0", "accelerator": "cu130", "cxx11_abi": true}',
            "accelerator: 'cu130', but the cell is 'cpu'",
        ),
    ],
)
def test_invalid_build_record(
    tmp_path: Path, target: TorchTarget, record: bytes, problem: str
) -> None:
    wheel = make_wheel(
        tmp_path,
        version="0.1.0+pt213cpu",
        tag="cp311-cp311-manylinux_2_28_x86_64",
        files={EXT: ext()},
        requires=["torch==2.13.*"],
        dist_info_files={BUILD_RECORD_NAME: record},
    )
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert codes(findings) == ["build-record"]
    assert problem in findings[0].message
    unchecked = replace(CPU, build_record=False)
    assert check_wheel(wheel, targets=[target], expect=unchecked) == []


@pytest.mark.parametrize(
    ("tag", "weaker", "severity"),
    [
        ("cp311-cp311-manylinux_2_34_x86_64", "error", Severity.ERROR),
        ("cp311-cp311-manylinux_2_34_x86_64", "warning", Severity.WARNING),
        ("cp311-cp311-linux_x86_64", "error", Severity.ERROR),
        ("cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64", "error", None),
    ],
)
def test_platform_tag(
    tmp_path: Path,
    target: TorchTarget,
    tag: str,
    weaker: Literal["error", "warning"],
    severity: Severity | None,
) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext()}, tag=tag)
    findings = check_wheel(
        wheel,
        targets=[target],
        expect=replace(CPU, weaker_platform_tag=weaker),
    )
    if severity is None:
        assert findings == []
        return
    assert codes(findings) == ["platform-tag"]
    assert findings[0].severity is severity
    assert "weaker than the promised manylinux_2_28_x86_64" in findings[0].message
    assert "--backend docker" in findings[0].message
    assert has_errors(findings) is (severity is Severity.ERROR)


def _documented_codes() -> dict[str, str]:
    """The codes table of the checks package docstring: code → what it catches."""
    lines = (checks.__doc__ or "").splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("====")]
    width = lines[rules[0]].index(" ")
    table: dict[str, str] = {}
    code = ""
    for row in lines[rules[1] + 1 : rules[2]]:
        name, text = row[:width].strip(), row[width:].strip()
        code = name or code
        table[code] = f"{table[code]} {text}" if not name else text
    return table


def test_every_registered_code_is_unique_and_documented() -> None:
    registered = [code for check in CHECKS for code in check.codes]
    names = [code.name for code in registered]
    assert len(set(names)) == len(names), names
    assert tuple(names) == CHECK_CODES
    assert len({check.name for check in CHECKS}) == len(CHECKS)
    assert _documented_codes() == {code.name: code.summary for code in registered}


def test_a_check_reporting_a_code_it_did_not_register_is_refused(
    monkeypatch: pytest.MonkeyPatch, target: TorchTarget
) -> None:
    def stray(subject: Subject) -> list[Finding]:
        return [Finding(code="made-up", severity=Severity.ERROR, message="x", path=None)]

    bogus = BinaryCheck(name="bogus", codes=(ABI_MISMATCH,), run=stray)
    monkeypatch.setattr(checks, "CHECKS", (*CHECKS, bogus))
    with pytest.raises(RuntimeError, match=r"check 'bogus' reported codes .*\['made-up'\]"):
        check_binaries([], targets=[target])


def _concrete(pattern: str) -> str:
    """A SONAME `pattern` matches: 'libcublas*.so*' → 'libcublas_x.so.1'."""
    return pattern.replace("*.so*", "_x.so.1").replace(".so*", ".so.1").replace("*", "x")


def _grafted(soname: str) -> str:
    """What auditwheel renames a grafted library to: 'libfoo.so.1' → 'libfoo-1a2b3c4d.so.1'."""
    stem, dot, rest = soname.partition(".so")
    return f"{stem}-1a2b3c4d{dot}{rest}"


def test_every_library_repair_excludes_is_flagged_when_grafted(tmp_path: Path) -> None:
    """Repair and check read one list: whatever repair keeps out, the check catches."""
    site = make_site_packages(
        tmp_path / "site", version="2.11.0+cu130", cuda="13.0", with_nvidia=True
    )
    target = load_torch_target(site)
    excludes = derive_excludes(site, load_knowledge().never_bundle)
    sonames = sorted({_concrete(e) for e in excludes})
    assert all(any(fnmatch.fnmatchcase(s, e) for s in sonames) for e in excludes)
    binaries = []
    for soname in sonames:
        grafted = _grafted(soname)
        so = write(tmp_path / "libs" / grafted, make_so(soname=grafted))
        binaries.append((f"ext_ok.libs/{grafted}", inspect_elf(so)))
    findings = check_binaries(binaries, targets=[target])
    flagged = {f.path for f in findings if f.code == "bundled-torch-lib"}
    assert sorted({a for a, _ in binaries} - flagged) == []
    # the group from the data decides the consequence named
    by_path = {f.path: f.message for f in findings}
    assert "aborts at import" in by_path["ext_ok.libs/libtorch_cuda_x-1a2b3c4d.so.1"]
    assert "second CUDA/ROCm runtime" in by_path["ext_ok.libs/librocsolver-1a2b3c4d.so.1"]


def test_cmd_check(tmp_path: Path, site: Path) -> None:
    import argparse

    wheel = wheel_with(tmp_path, {EXT: ext(undefined=[*CLEAN_UNDEFINED, UNDEFINED])})
    args = argparse.Namespace(
        wheels=[wheel],
        torch_sites=[site],
        accelerator="cpu",
        arch_list=None,
        platform_tag="manylinux_2_28_x86_64",
        weaker_platform_tag="error",
        local_version="pt213cpu",
        requires_torch="torch==2.13.*",
        no_build_record=False,
        json=False,
    )
    out = io.StringIO()
    assert cmd_check(args, out) == ExitCode.CHECK_FAILED
    text = out.getvalue()
    assert text.startswith(f"FAIL  {wheel.name}\n  error   undefined-symbol: {EXT} needs c10::")
    # what the verdict is about: the torch, and the device code of each shared object
    assert f"\n  checked against torch 2.13.0+cpu ({site})\n" in text
    assert text.endswith(f"\n  {EXT}: no device code\n")


@pytest.mark.parametrize(
    ("tag", "cells", "abi", "expected"),
    [
        # the project's own cp39 floor under a plan whose oldest Python is 3.11: a note
        ("cp39-abi3-manylinux_2_28_x86_64", ("3.11", "3.12"), "abi3", [Severity.INFO]),
        ("cp311-abi3-manylinux_2_28_x86_64", ("3.11", "3.12"), "abi3", []),
        # the abi3 floor above a promised Python: that cell never gets the wheel
        ("cp312-abi3-manylinux_2_28_x86_64", ("3.11", "3.12"), "abi3", [Severity.ERROR]),
        # the plan promised abi3 but the project built a per-Python wheel
        ("cp311-cp311-manylinux_2_28_x86_64", ("3.11", "3.12"), "abi3", [Severity.ERROR]),
        ("cp311-cp311-manylinux_2_28_x86_64", ("3.11",), "per-python", []),
        (
            "cp311-cp311-manylinux_2_28_x86_64",
            ("3.12",),
            "per-python",
            [Severity.ERROR, Severity.INFO],
        ),
        ("py3-none-manylinux_2_28_x86_64", ("3.11", "3.12"), "abi3", [Severity.INFO]),
    ],
)
def test_python_coverage_judges_the_tag_against_the_cells(
    tmp_path: Path,
    target: TorchTarget,
    tag: str,
    cells: tuple[str, ...],
    abi: AbiMode,
    expected: list[Severity],
) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext()}, tag=tag)
    expect = replace(
        CPU,
        cells=tuple(f"torch2.13.0-cpu-cp{py.replace('.', '')}" for py in cells),
        abi=abi,
    )
    findings = [f for f in check_wheel(wheel, targets=[target], expect=expect)]
    assert codes(findings) == ["python-coverage"] * len(expected)
    assert [f.severity for f in findings] == expected
    if Severity.ERROR in expected:
        assert "pip never installs it there" in findings[0].message
        assert findings[0].details[0].startswith("not covered: torch2.13.0-cpu-cp3")
    if tag.startswith("cp39-abi3"):
        assert "Python 3.9 and newer, below the oldest Python its cells promise (3.11)" in (
            findings[0].message
        )


def test_standalone_check_judges_as_the_build_did(tmp_path: Path, site: Path) -> None:
    """A wheel `build` accepted with a platform-tag warning is not failed by `check` alone."""
    import argparse

    raw = make_wheel(tmp_path / "raw", tag="cp311-cp311-manylinux_2_34_x86_64", files={EXT: ext()})
    # built for a manylinux_2_28 promise, judged "warning" when the tag came out weaker
    record = built_record(make_job(python="3.11"), weaker_platform_tag="warning")
    assert record["promised_platform_tag"] == "manylinux_2_28_x86_64"
    wheel = relabel_wheel(
        raw,
        out_dir=tmp_path / "wheels",
        local_version="pt213cpu",
        requires_dist_torch="torch==2.13.*",
        build_record=record,
    )
    args = argparse.Namespace(
        wheels=[wheel],
        torch_sites=[site],
        accelerator=None,
        arch_list=None,
        platform_tag=None,
        weaker_platform_tag=None,
        local_version=None,
        requires_torch=None,
        no_build_record=False,
        json=False,
    )
    out = io.StringIO()
    assert cmd_check(args, out) == ExitCode.OK, out.getvalue()
    assert "warning platform-tag" in out.getvalue().replace("  ", " ")
    # an explicit --weaker-platform-tag error still wins
    out = io.StringIO()
    assert cmd_check(argparse.Namespace(**{**vars(args), "weaker_platform_tag": "error"}), out) == (
        ExitCode.CHECK_FAILED
    )


# --------------------------------------------------------------------------- linux_aarch64

ARM_TAG = "cp312-cp312-manylinux_2_28_aarch64"
ARM_CPU = replace(CPU, platform_tag="manylinux_2_28_aarch64")
# glibc's aarch64 port starts at GLIBC_2.17: no symbol there has an older version node
ARM_UNDEFINED = [
    *TORCH_EXPORTS,
    C10_ERROR_CXX11,
    Undef("memcpy", "GLIBC_2.17", "libc.so.6"),
    Undef(STRING_CXX11, "GLIBCXX_3.4.21", "libstdc++.so.6"),
    Undef("_Unwind_Resume", "GCC_3.0", "libgcc_s.so.1"),
    "PyModule_Create2",
    Undef("__cxa_finalize", "GLIBC_2.17", "libc.so.6", weak=True),
]


def arm_ext(**kwargs: object) -> bytes:
    return ext(machine="aarch64", undefined=ARM_UNDEFINED, **kwargs)


def test_aarch64_wheel_of_aarch64_objects_is_clean(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: arm_ext()}, tag=ARM_TAG)
    assert check_wheel(wheel, targets=[target], expect=ARM_CPU) == []


def test_x86_object_in_an_aarch64_wheel(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: ext(undefined=ARM_UNDEFINED)}, tag=ARM_TAG)
    findings = check_wheel(wheel, targets=[target], expect=ARM_CPU)
    assert codes(findings) == ["elf-machine"]
    assert findings[0].severity is Severity.ERROR
    assert findings[0].path == EXT
    assert findings[0].message.startswith(
        f"{EXT} is a x86_64 binary in a wheel tagged manylinux_2_28_aarch64: pip installs it "
        "on aarch64 machines, where it cannot load."
    )
    assert findings[0].details == ("ELF machine: EM_X86_64", "tag needs: aarch64")


def test_aarch64_object_in_an_x86_wheel(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: arm_ext()})
    findings = check_wheel(wheel, targets=[target], expect=CPU)
    assert codes(findings) == ["elf-machine"]
    assert "is a aarch64 binary in a wheel tagged manylinux_2_28_x86_64" in findings[0].message


def test_grafted_library_of_the_wrong_machine(tmp_path: Path, target: TorchTarget) -> None:
    grafted = "bt_scatter.libs/libzstd-a34b3233.so.1"
    files = {EXT: arm_ext(), grafted: make_so(soname="libzstd.so.1")}
    findings = check_wheel(
        wheel_with(tmp_path, files, tag=ARM_TAG), targets=[target], expect=ARM_CPU
    )
    assert codes(findings) == ["elf-machine"]
    assert findings[0].path == grafted


def test_untagged_arch_wheel_is_judged_by_its_arch(tmp_path: Path, target: TorchTarget) -> None:
    # linux_aarch64 promises no glibc, but still an architecture
    wheel = wheel_with(tmp_path, {EXT: ext()}, tag="cp312-cp312-linux_aarch64")
    findings = check_wheel(wheel, targets=[target], expect=replace(CPU, platform_tag=None))
    assert codes(findings) == ["elf-machine"]


def test_aarch64_wheel_tagged_for_x86(tmp_path: Path, target: TorchTarget) -> None:
    """A cell promised torch's aarch64 tag: an x86 tag is weaker (it reaches no aarch64 user)."""
    wheel = wheel_with(tmp_path, {EXT: arm_ext()})
    findings = check_wheel(wheel, targets=[target], expect=ARM_CPU)
    assert codes(findings) == ["platform-tag", "elf-machine"]
    assert "weaker than the promised manylinux_2_28_aarch64" in findings[0].message


def test_aarch64_tag_newer_than_torchs(tmp_path: Path, target: TorchTarget) -> None:
    wheel = wheel_with(tmp_path, {EXT: arm_ext()}, tag="cp312-cp312-manylinux_2_34_aarch64")
    findings = check_wheel(wheel, targets=[target], expect=ARM_CPU)
    assert codes(findings) == ["platform-tag"]
    assert "weaker than the promised manylinux_2_28_aarch64" in findings[0].message


def test_aarch64_cuda_wheel_needs_sm90_and_sm100(tmp_path: Path, target: TorchTarget) -> None:
    """Grace Hopper (sm_90) and Grace Blackwell (sm_100): device code for both, + PTX."""
    expect = replace(ARM_CPU, accelerator="cu130", arch_list="9.0;10.0+PTX")
    hopper_only = fatbin([(FATBIN_ELF, 90, 0)])
    wheel = wheel_with(
        tmp_path / "a",
        {EXT: arm_ext(sections={".nv_fatbin": hopper_only})},
        tag=ARM_TAG,
        accelerator="cu130",
    )
    findings = check_wheel(wheel, targets=[target], expect=expect)
    assert codes(findings) == ["no-device-code"]
    assert "lacks cubin sm_100, PTX compute_100" in findings[0].message
    both = fatbin([(FATBIN_ELF, 90, 0), (FATBIN_ELF, 100, 0), (FATBIN_PTX, 100, 0)])
    wheel = wheel_with(
        tmp_path / "b",
        {EXT: arm_ext(sections={".nv_fatbin": both})},
        tag=ARM_TAG,
        accelerator="cu130",
    )
    assert check_wheel(wheel, targets=[target], expect=expect) == []
