"""The stable-ABI check (wheel/checks/stable.py) on crafted wheels, judged by the packaged
facts (data/stable_abi.json) alone: no torch installed unless a test gives a target."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.crafted import Undef, make_site_packages, make_so, make_wheel

from buildtools.knowledge import load_knowledge
from buildtools.knowledge.stableabi import load_stable_abi
from buildtools.model import Finding, Severity
from buildtools.wheel.checks import Expectation, check_wheel, load_torch_target
from buildtools.wheel.checks.stable import wheel_floor

SO = "ext_stable/_C.abi3.so"
STABLE = Expectation(accelerator="cpu", abi="stable", build_record=False)
CHECK_FAIL = "_ZN3c106detail14torchCheckFailEPKcS2_jS2_"
SYSTEM = [
    Undef("memcpy", "GLIBC_2.14", "libc.so.6"),
    Undef("__cxa_throw", "CXXABI_1.3", "libstdc++.so.6"),
    "PyModule_Create2",
]


def _shim(since: str) -> str:
    """A shim of the packaged facts first exported by `since` (the data, not a guess)."""
    facts = load_stable_abi()
    names = sorted(
        s.name
        for s in facts.symbols.values()
        if s.since == since and s.library == "libtorch_cpu.so" and s.until is None
    )
    assert names, f"no shim new in {since} in the facts"
    return names[0]


def _wheel(tmp_path: Path, undefined: list[str | Undef], requires: str | None) -> Path:
    so = make_so(
        needed=["libtorch.so", "libc.so.6"], undefined=[*SYSTEM, *undefined], exports=["PyInit__C"]
    )
    return make_wheel(
        tmp_path,
        name="ext_stable",
        tag="cp310-abi3-manylinux_2_28_x86_64",
        files={SO: so},
        requires=[requires] if requires else [],
    )


def _stable(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code in ("unstable-symbol", "shim-too-new")]


def test_a_wheel_of_old_shims_passes(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype", "torch_call_dispatcher"], "torch>=2.10,<2.16")
    assert _stable(check_wheel(wheel, targets=[], expect=STABLE)) == []


def test_a_c10_function_is_named_demangled_with_why(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype", CHECK_FAIL], "torch>=2.10")
    (f,) = _stable(check_wheel(wheel, targets=[], expect=STABLE))
    assert f.code == "unstable-symbol" and f.severity is Severity.ERROR
    assert f.message.startswith(
        f"{SO} imports c10::detail::torchCheckFail(char const*, char const*, unsigned int, "
        "char const*): C++ API of c10::"
    )
    assert f.details == (f"mangled: {CHECK_FAIL}",)
    assert "\n" not in f.message


def test_a_shim_newer_than_the_floor_names_its_first_release(tmp_path: Path) -> None:
    new = _shim("2.12.0")
    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype", new], "torch>=2.10,<2.16")
    (f,) = _stable(check_wheel(wheel, targets=[], expect=STABLE))
    assert f.code == "shim-too-new"
    assert f"imports {new}, a stable shim first in torch 2.12.0" in f.message
    assert "allows torch 2.10.0" in f.message
    assert "-DTORCH_TARGET_VERSION=0x020a000000000000" in f.message
    assert "or raise the floor to torch>=2.12" in f.message
    # the same wheel with a floor that has it passes
    ok = _wheel(tmp_path / "ok", ["aoti_torch_get_dtype", new], "torch>=2.12,<2.16")
    assert _stable(check_wheel(ok, targets=[], expect=STABLE)) == []


def test_the_floor_is_the_oldest_release_the_pin_admits() -> None:
    kb = load_knowledge()
    assert wheel_floor(["torch>=2.10"], kb)[:2] == ("2.10.0", "2.15.0")
    assert wheel_floor(["torch<2.15,>=2.12"], kb)[:2] == ("2.12.0", "2.14.1")
    assert wheel_floor(["torch==2.13.*"], kb)[:2] == ("2.13.0", "2.13.0")
    assert wheel_floor(["numpy>=1"], kb) == (None, None, None)
    assert wheel_floor(["torch>=3.0"], kb)[:2] == (None, None)


@pytest.mark.parametrize(
    ("requires", "allows"), [(None, "any torch"), ("torch>=2.8", "torch 2.8.0")]
)
def test_a_floor_before_the_stable_abi_cannot_be_proven(
    tmp_path: Path, requires: str | None, allows: str
) -> None:
    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype"], requires)
    (f,) = _stable(check_wheel(wheel, targets=[], expect=STABLE))
    assert f.code == "shim-too-new"
    assert f"allows {allows}" in f.message and "facts start at torch 2.10.0" in f.message


def test_a_c_function_of_torch_outside_the_headers(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, ["aoti_torch_not_a_real_shim", "THPVariable_Wrap_c"], "torch>=2.10")
    site = make_site_packages(tmp_path / "site", torch_exports=["THPVariable_Wrap_c"])
    findings = _stable(check_wheel(wheel, targets=[load_torch_target(site)], expect=STABLE))
    messages = sorted(f.message for f in findings)
    assert [f.code for f in findings] == ["unstable-symbol", "unstable-symbol"]
    assert (
        "THPVariable_Wrap_c: exported by the target torch, outside the stable surface"
        in messages[0]
    )
    assert (
        "aoti_torch_not_a_real_shim: a C function of torch that no stable C header" in messages[1]
    )


def test_other_abi_modes_are_not_judged(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, [CHECK_FAIL], "torch==2.13.*")
    abi3 = Expectation(accelerator="cpu", abi="abi3", build_record=False)
    assert _stable(check_wheel(wheel, targets=[], expect=abi3)) == []


def test_libstdcxx_templates_torch_happens_to_export_are_not_torch_api(tmp_path: Path) -> None:
    """ld binds an unversioned libstdc++ template to the first library that defines it; torch's
    libraries export copies of some (a real 2.13.0 build: basic_stringbuf::str() &&)."""
    stringbuf = "_ZNOSt7__cxx1115basic_stringbufIcSt11char_traitsIcESaIcEE3strEv"
    site = make_site_packages(tmp_path / "site", torch_exports=[stringbuf])
    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype", stringbuf], "torch>=2.10")
    assert _stable(check_wheel(wheel, targets=[load_torch_target(site)], expect=STABLE)) == []


def test_check_abi_stable_judges_a_wheel_buildtools_did_not_build(tmp_path: Path) -> None:
    """`buildtools check --abi stable`: a wheel with no build record (from PyPI) judged as a
    stable-ABI wheel, one line per symbol."""
    import io

    from buildtools.cli.main import main
    from buildtools.errors import ExitCode

    wheel = _wheel(tmp_path, ["aoti_torch_get_dtype", CHECK_FAIL], "torch>=2.10")
    site = make_site_packages(tmp_path / "site")
    argv = ["check", str(wheel), "--no-build-record", "--torch", str(site)]
    out = io.StringIO()
    assert main([*argv, "--abi", "stable"], out) == ExitCode.CHECK_FAILED
    assert "error   unstable-symbol: ext_stable/_C.abi3.so imports c10::detail::torchCheckFail" in (
        out.getvalue()
    )
    plain = io.StringIO()
    main(argv, plain)
    assert "unstable-symbol" not in plain.getvalue()  # without it: no ABI mode, no judgment
