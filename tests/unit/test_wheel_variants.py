"""Wheel variants (PEP 825): properties from the build record, variantlib's validation of the
documents, the variant twins and their check, the variant index a publish writes."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel
from pydantic import ValidationError
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from buildtools.errors import PublishError
from buildtools.index.gate import SmokeGate
from buildtools.index.manifest import IndexedWheel, _wheel_line, read_manifest, wheel_identity
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge
from buildtools.matrix.indexconfig import IndexConfig
from buildtools.model import Accelerator, BuildRecord, Severity
from buildtools.wheel.checks.variantclaims import variant_findings
from buildtools.wheel.meta import variant_wheel
from buildtools.wheel.variantprops import (
    VariantSpec,
    dist_info_json,
    index_json,
    parse_variant_json,
    variant_facts,
    variant_spec,
)

CUDA_SO = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "ext_sm80_sm90.so"
VARIANTS = IndexSettings(wheel_variants=True)


def _record(accelerator: str, torch: str = "2.13.0", **extra: object) -> BuildRecord:
    acc = Accelerator.parse(accelerator)
    return BuildRecord(torch=f"{torch}+{accelerator}", accelerator=acc, cxx11_abi=True, **extra)  # type: ignore[arg-type]


def _record_json(accelerator: str, torch: str, **extra: object) -> bytes:
    body = {"schema": 1, "torch": f"{torch}+{accelerator}", "accelerator": accelerator}
    return json.dumps({**body, "cxx11_abi": True, **extra}).encode()


def _wheel(
    directory: Path, accelerator: str = "cpu", torch: str = "2.13.0", **extra: object
) -> Path:
    """A bt-scatter wheel as `buildtools build` writes it (a CUDA one with real sm_80/sm_90)."""
    minor = "".join(torch.split(".")[:2])
    files = {"bt_scatter/__init__.py": b"\n"}
    if accelerator != "cpu":
        files["bt_scatter/_C.cpython-311-x86_64-linux-gnu.so"] = CUDA_SO.read_bytes()
    return make_wheel(
        directory,
        name="bt_scatter",
        version=f"0.1.0+pt{minor}{accelerator}",
        tag="cp311-cp311-manylinux_2_28_x86_64",
        files=files,
        requires=[f"torch=={torch.rsplit('.', 1)[0]}.*"],
        extra_metadata=["Requires-Python: >=3.9"],
        dist_info_files={"buildtools.json": _record_json(accelerator, torch, **extra)},
    )


def test_a_cuda_cell_says_torch_cuda_and_each_arch_of_its_list() -> None:
    spec = variant_spec(_record("cu130", "2.11.0", cuda="13.0", arch_list="8.0;9.0a;12.0+PTX"))
    assert spec.label == "cu130"
    assert spec.properties == (
        "abi_dependency :: torch :: 2.11",
        "nvidia :: cuda_version_lower_bound :: 13.0",
        "nvidia :: sm_arch :: 120_real",
        "nvidia :: sm_arch :: 120_virtual",
        "nvidia :: sm_arch :: 80_real",
        "nvidia :: sm_arch :: 90a_real",
    )


def test_a_cpu_cell_says_only_its_torch_and_a_stable_wheel_every_release() -> None:
    assert variant_spec(_record("cpu")).properties == ("abi_dependency :: torch :: 2.13",)
    stable = _record("cpu", torch_versions=("2.10.0", "2.11.0", "2.11.1", "2.13.0"))
    assert stable.torch_versions is not None
    assert variant_spec(stable).values("abi_dependency", "torch") == ("2.10", "2.11", "2.13")


def test_a_rocm_cell_gets_no_variant_and_says_why() -> None:
    with pytest.raises(ValueError, match="no ROCm variant provider exists"):
        variant_spec(_record("rocm7.2", hip="7.2", arch_list="gfx942"))


def test_variant_json_is_what_variantlib_reads_back_with_the_schema_uv_reads() -> None:
    spec = variant_spec(_record("cu130", "2.11.0", cuda="13.0", arch_list="8.0;9.0"))
    raw = dist_info_json(spec)
    data = json.loads(raw)
    assert (
        data["$schema"]
        == variant_facts().schema
        == ("https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json")
    )
    assert data["default-priorities"]["namespace"] == ["nvidia", "abi_dependency"]
    assert data["providers"]["abi_dependency"] == {"static-properties": {"torch": ["2.11"]}}
    assert VariantDistInfo(raw, expected_label="cu130").variant_label == "cu130"
    assert parse_variant_json(raw, label="cu130") == spec


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d.update({"$schema": "https://variants-schema.wheelnext.dev/v0.2.0.json"}),
            "schema",
        ),
        (
            lambda d: d["variants"].update({"cpu": {"abi_dependency": {"torch": ["2.13"]}}}),
            "2 variants",
        ),
        (lambda d: d["variants"]["cu130"].update({"rocm": {"x": ["1"]}}), "rocm"),
        (lambda d: d["variants"]["cu130"]["nvidia"].update({"sm_arch": ["SM_90"]}), "SM_90"),
    ],
)
def test_a_variant_json_variantlib_or_buildtools_refuses_is_refused(
    edit: object, message: str
) -> None:
    data = json.loads(dist_info_json(variant_spec(_record("cu130", cuda="13.0", arch_list="9.0"))))
    edit(data)  # type: ignore[operator]
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_variant_json(json.dumps(data).encode(), label="cu130")


def test_the_index_document_lists_every_label_once_and_refuses_two_meanings() -> None:
    cpu = variant_spec(_record("cpu"))
    cuda = variant_spec(_record("cu130", cuda="13.0", arch_list="9.0"))
    doc = json.loads(index_json([cuda, cpu, cpu]))
    assert sorted(doc["variants"]) == ["cpu", "cu130"]
    assert VariantsJson(doc).variants["cpu"].properties[0].to_str() == (
        "abi_dependency :: torch :: 2.13"
    )
    liar = VariantSpec(label="cpu", properties=("abi_dependency :: torch :: 2.11",))
    with pytest.raises(ValueError, match="label 'cpu' stands for two sets of properties"):
        index_json([cpu, liar])


def test_a_twin_changes_only_its_version_name_and_variant_json(tmp_path: Path) -> None:
    src = _wheel(tmp_path / "in")
    spec = variant_spec(_record("cpu"))
    twin = variant_wheel(
        src,
        out_dir=tmp_path / "a",
        local_version="pt213",
        label="cpu",
        variant_json=dist_info_json(spec),
    )
    again = variant_wheel(
        src,
        out_dir=tmp_path / "b",
        local_version="pt213",
        label="cpu",
        variant_json=dist_info_json(spec),
    )
    plain = variant_wheel(
        src, out_dir=tmp_path / "c", local_version="pt213", label=None, variant_json=b""
    )
    assert twin.name == "bt_scatter-0.1.0+pt213-cp311-cp311-manylinux_2_28_x86_64-cpu.whl"
    assert plain.name == "bt_scatter-0.1.0+pt213-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert twin.read_bytes() == again.read_bytes()  # the same wheel makes the same twin
    with zipfile.ZipFile(twin) as z, zipfile.ZipFile(src) as s, zipfile.ZipFile(plain) as p:
        assert z.read("bt_scatter/__init__.py") == s.read("bt_scatter/__init__.py")
        assert z.read("bt_scatter-0.1.0+pt213.dist-info/variant.json") == dist_info_json(spec)
        assert b"Version: 0.1.0+pt213\n" in z.read("bt_scatter-0.1.0+pt213.dist-info/METADATA")
        assert "bt_scatter-0.1.0+pt213.dist-info/variant.json" not in p.namelist()
    assert variant_findings(twin) == [] and variant_findings(plain) == []


def _twin(src: Path, out: Path, raw: bytes, label: str = "cu130") -> Path:
    return variant_wheel(src, out_dir=out, local_version="pt211", label=label, variant_json=raw)


def test_a_label_that_claims_an_arch_the_wheel_has_no_code_for_is_an_error(tmp_path: Path) -> None:
    record = {"cuda": "13.0", "arch_list": "8.0;9.0;10.0"}
    src = _wheel(tmp_path / "in", "cu130", "2.11.0", **record)
    spec = variant_spec(_record("cu130", "2.11.0", **record))
    [bad] = variant_findings(_twin(src, tmp_path / "out", dist_info_json(spec)))
    assert bad.code == "variant-properties" and bad.severity is Severity.ERROR
    assert (
        "claims sm_arch 100_real, which bt_scatter/_C.cpython-311-x86_64-linux-gnu.so"
        in bad.message
    )
    assert "it has 80_real, 90_real" in bad.message
    honest = _wheel(tmp_path / "ok", "cu130", "2.11.0", cuda="13.0", arch_list="8.0;9.0")
    good = variant_spec(_record("cu130", "2.11.0", cuda="13.0", arch_list="8.0;9.0"))
    assert variant_findings(_twin(honest, tmp_path / "ok-out", dist_info_json(good))) == []


def test_a_cpu_wheel_labelled_as_a_gpu_variant_is_an_error(tmp_path: Path) -> None:
    src = _wheel(tmp_path / "in")
    lie = variant_spec(_record("cu130", cuda="13.0", arch_list="9.0"))
    findings = variant_findings(_twin(src, tmp_path / "out", dist_info_json(lie)))
    assert {f.code for f in findings} == {"variant-properties"}
    assert "label 'cu130' claims properties its build record does not give (label 'cpu'" in (
        findings[0].message
    )
    assert "none of its shared objects carries CUDA device code" in findings[1].message


def test_a_label_without_variant_json_is_an_error(tmp_path: Path) -> None:
    src = _wheel(tmp_path / "in")
    named = src.with_name(src.name.removesuffix(".whl") + "-cpu.whl")
    src.rename(named)
    [bad] = variant_findings(named)
    assert "has the variant label 'cpu' but it has no variant.json" in bad.message


def test_the_manifest_keeps_a_variant_and_refuses_a_bad_one() -> None:
    entry = IndexedWheel(
        filename="a-1.0+pt213-cp311-cp311-linux_x86_64-cpu.whl",
        sha256="0" * 64,
        size=1,
        name="a",
        version="1.0+pt213",
        requires_python=None,
        metadata_sha256="1" * 64,
        torch="2.13.0",
        torch_versions=("2.13.0",),
        torch_specifier="==2.13.*",
        accelerator="cpu",
        variant_label="cpu",
        variant_properties=("abi_dependency :: torch :: 2.13",),
    )
    raw = entry.to_json()
    assert IndexedWheel.from_json(raw) == entry
    assert _wheel_line(entry) == json.dumps(raw, sort_keys=True, ensure_ascii=False)
    plain = "a-1.0+pt213-cp311-cp311-linux_x86_64.whl"
    assert wheel_identity(entry.filename) != wheel_identity(plain)
    for key, value, message in (
        ("variant_label", "cu130", "is not its file name's label"),
        ("variant_label", "CPU!", "expected a PEP 825 label"),
        ("variant_properties", ["torch 2.13"], "namespace :: feature :: value"),
        ("variant_fallback", True, "true only for a plain"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            IndexedWheel.from_json({**raw, key: value})


def test_wheel_variants_need_the_accelerator_in_the_label() -> None:
    assert IndexConfig(wheel_variants=True).wheel_variants
    with pytest.raises(ValidationError, match="needs \\{accelerator\\} in local_version"):
        IndexConfig(wheel_variants=True, local_version="pt{torch_major}{torch_minor}")


def test_publish_adds_twins_fallback_and_the_variants_json_on_their_own_pages(
    tmp_path: Path,
) -> None:
    kb = load_knowledge()
    cpu = _wheel(tmp_path / "wh", "cpu", "2.13.0")
    cuda = _wheel(tmp_path / "wh", "cu130", "2.11.0", cuda="13.0", arch_list="8.0;9.0")
    rocm = _wheel(tmp_path / "wh", "rocm7.2", "2.13.0", hip="7.2", arch_list="gfx942")
    site = tmp_path / "site"
    sources = [read_wheel(p) for p in (cpu, cuda, rocm)]
    result = publish(site, sources, VARIANTS, kb)
    assert sorted(result.added) == [
        "bt_scatter-0.1.0+pt211-cp311-cp311-manylinux_2_28_x86_64-cu130.whl",
        "bt_scatter-0.1.0+pt211cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
        "bt_scatter-0.1.0+pt213-cp311-cp311-manylinux_2_28_x86_64-cpu.whl",
        "bt_scatter-0.1.0+pt213-cp311-cp311-manylinux_2_28_x86_64.whl",
        "bt_scatter-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "bt_scatter-0.1.0+pt213rocm7.2-cp311-cp311-manylinux_2_28_x86_64.whl",
    ]
    assert [n.split(": ", 1)[1][:30] for n in result.notes] == ["no variant wheel: no ROCm vari"]
    page = (site / "wheel-variants" / "bt-scatter" / "index.html").read_text()
    flat = (site / "wheel-variants.html").read_text()
    for name in ("bt_scatter-0.1.0+pt213-variants.json", "bt_scatter-0.1.0+pt211-variants.json"):
        data = (site / "wheels" / name).read_bytes()
        link = f"{name.replace('+', '%2B')}#sha256={hashlib.sha256(data).hexdigest()}"
        assert f'href="../../wheels/{link}"' in page and f'href="wheels/{link}"' in flat
        VariantsJson(json.loads(data))
    assert "pt213cpu" not in page and "-cpu.whl" in page and "pt213-cp311" in page
    ordinary = (site / "torch-2.13.0+cpu.html").read_text() + (
        site / "simple/bt-scatter/index.html"
    ).read_text()
    assert (
        "pt213cpu" in ordinary
        and "-cpu.whl" not in ordinary
        and "+pt213-" not in ordinary.replace("%2B", "+")
    )
    assert "variants" not in (site / "index.json").read_text().split('"generated"')[0].replace(
        "variant_", ""
    )
    front = (site / "index.html").read_text()
    command = "uv pip install --preview-features wheel-variants --index-url &lt;site-url&gt;"
    assert f"{command}/wheel-variants/ bt-scatter &#x27;torch==2.13.*&#x27;" in front
    assert f"{command}/wheel-variants/ bt-scatter &#x27;torch==2.11.*&#x27;" in front
    assert front.count('class="cmd-uv-variants"') == 2  # the ROCm row has none
    # a second publish of the same wheels makes the same twins: nothing changes
    again = publish(site, [read_wheel(p) for p in (cpu, cuda, rocm)], VARIANTS, kb)
    assert again.added == () and len(again.unchanged) == 6
    assert len(read_manifest(site).wheels) == 6


def test_the_gate_lets_a_twin_out_with_its_wheel_and_holds_it_back_with_it(tmp_path: Path) -> None:
    kb = load_knowledge()
    cpu = read_wheel(_wheel(tmp_path / "wh"))
    passed = SmokeGate(statuses={cpu.wheel.sha256: ("passed",)})
    out = publish(tmp_path / "a", [cpu], VARIANTS, kb, gate=passed)
    assert len(out.added) == 3
    held = publish(tmp_path / "b", [cpu], VARIANTS, kb, gate=SmokeGate(statuses={}))
    assert held.added == () and [n for n, _ in held.held_back] == [cpu.wheel.filename]


def test_a_variant_wheel_given_to_publish_is_refused(tmp_path: Path) -> None:
    src = _wheel(tmp_path / "in")
    spec = variant_spec(_record("cpu"))
    twin = variant_wheel(
        src,
        out_dir=tmp_path / "t",
        local_version="pt213",
        label="cpu",
        variant_json=dist_info_json(spec),
    )
    with pytest.raises(PublishError, match="makes variant wheels itself"):
        publish(tmp_path / "site", [read_wheel(twin)], IndexSettings(), load_knowledge())
