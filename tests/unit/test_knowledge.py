"""The knowledge base: shipped data loads, known facts hold, broken data is reported well."""

from __future__ import annotations

import fnmatch
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildtools.ecosystem import ECOSYSTEM_FILE, load_ecosystem
from buildtools.errors import KnowledgeError
from buildtools.knowledge import DATA_DIR, Knowledge, load_knowledge
from buildtools.model import PLATFORMS, Accelerator, Cell

A = Accelerator.parse

KB = load_knowledge()


def cu(version: str) -> str:
    return "cu" + version.replace(".", "")


def all_rows(kb: Knowledge) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for r in kb.torch.values():
        rows += [(f"torch {r.minor}", r), (f"torch {r.minor} aarch64", r.aarch64)]
    rows += [(f"CUDA {c.version}", c) for c in kb.cuda_releases.values()]
    rows += [(f"ROCm {r.version}", r) for r in kb.rocm_releases.values()]
    rows += [(f"image {i.image}", i) for i in kb.images]
    rows += [(f"never_bundle {n.pattern}", n) for n in kb.never_bundle_rules]
    return rows


# -- the shipped data ---------------------------------------------------------------------------
def test_shipped_data_loads_and_is_cached() -> None:
    assert load_knowledge() is KB
    assert list(KB.torch) == [f"2.{n}" for n in range(16)]
    assert {"11.7", "12.8", "13.0", "13.2"} <= set(KB.cuda_releases)
    assert {"5.4.2", "6.4", "7.2"} <= set(KB.rocm_releases)


def test_every_row_has_a_source_and_unconfirmed_rows_say_why() -> None:
    for name, row in all_rows(KB):
        assert getattr(row, "source", "").strip(), name
        if not getattr(row, "confirmed", True):
            assert getattr(row, "note", None), f"{name} is unconfirmed without a note"
    assert len(KB.unconfirmed()) == sum(
        1 for _, r in all_rows(KB) if not getattr(r, "confirmed", True)
    )


def test_torch_versions_lists_every_patch_sorted() -> None:
    versions = KB.torch_versions()
    assert {"2.0.0", "2.5.0", "2.5.1", "2.11.0", "2.12.1", "2.14.1", "2.15.0"} <= set(versions)
    assert versions.index("2.9.1") < versions.index("2.10.0")
    assert len(versions) == len(set(versions))


def test_torch_release_accepts_minor_patch_and_local_label() -> None:
    assert KB.torch_release("2.11") is KB.torch_release("2.11.0+cu130") is KB.torch["2.11"]
    with pytest.raises(
        LookupError, match=r"^torch 2\.99 is not in the knowledge base; known: 2\.0 … 2\.15$"
    ):
        KB.torch_release("2.99")
    with pytest.raises(ValueError, match="not a torch version"):
        KB.torch_release("latest")


@pytest.mark.parametrize(
    ("minor", "facts"),  # facts: pypi_cuda, cxx11_abi, platform_tag, cxx_std, stable_abi
    [
        ("2.0", ("11.7", False, "manylinux2014", "c++17", False)),
        ("2.5", ("12.4", False, "manylinux2014", "c++17", False)),
        ("2.6", ("12.4", False, "manylinux2014", "c++17", False)),
        ("2.7", ("12.6", True, "manylinux_2_28", "c++17", False)),
        ("2.8", ("12.8", True, "manylinux_2_28", "c++17", False)),
        ("2.10", ("12.8", True, "manylinux_2_28", "c++17", True)),
        ("2.11", ("13.0", True, "manylinux_2_28", "c++17", True)),
        ("2.12", ("13.0", True, "manylinux_2_28", "c++20", True)),
        ("2.15", ("13.2", True, "manylinux_2_28", "c++20", True)),
    ],
)
def test_known_release_facts(minor: str, facts: tuple[object, ...]) -> None:
    r = KB.torch_release(minor)
    assert (r.pypi_cuda, r.cxx11_abi, r.platform_tag, r.cxx_std, r.stable_abi) == facts


def test_python_and_variant_lists() -> None:
    assert KB.torch["2.4"].python == ("3.8", "3.9", "3.10", "3.11", "3.12")
    assert KB.torch["2.15"].python[0] == "3.11"
    assert KB.torch["2.4"].cuda == ("11.8", "12.1", "12.4")
    assert KB.torch["2.4"].rocm == ("6.0", "6.1")
    assert KB.torch["2.5"].patches == ("2.5.0", "2.5.1")


def test_the_2_6_abi_split() -> None:
    assert not KB.cxx11_abi("2.6", A("cu124"))
    assert KB.cxx11_abi("2.6", A("cu126"))
    assert KB.cxx11_abi("2.6", A("rocm6.2.4"))
    assert KB.cxx11_abi("2.6", A("cpu"), "linux_aarch64")
    assert KB.wheel_platform_tag("2.6", A("cu124")) == "manylinux2014_x86_64"
    assert KB.wheel_platform_tag("2.6", A("cu126")) == "manylinux_2_28_x86_64"
    assert KB.wheel_platform_tag("2.11", A("cu130"), "linux_aarch64") == "manylinux_2_28_aarch64"


# -- cells --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        (
            Cell(torch="2.4", accelerator="cu121", python="3.13"),
            "torch 2.4 has no Python 3.13 wheels (it supports 3.8–3.12)",
        ),
        (
            Cell(torch="2.4", accelerator="cu128", python="3.12"),
            "torch 2.4 was not built for CUDA 12.8 (built: 11.8, 12.1, 12.4)",
        ),
        (
            Cell(torch="2.4", accelerator="rocm7.0", python="3.12"),
            "torch 2.4 was not built for ROCm 7.0 (built: 6.0, 6.1)",
        ),
        (
            Cell(torch="2.11.7", accelerator="cpu", python="3.12"),
            "torch 2.11.7 is not a known release; known 2.11 releases: 2.11.0",
        ),
        (
            Cell(torch="2.99", accelerator="cpu", python="3.12"),
            "torch 2.99 is not in the knowledge base; known: 2.0 … 2.15",
        ),
        (
            Cell(torch="2.5", accelerator="cpu", python="3.13", platform="linux_aarch64"),
            "torch 2.5 has no Python 3.13 wheels for linux_aarch64 (it supports 3.9–3.12 there)",
        ),
        (
            Cell(torch="2.9", accelerator="rocm6.4", python="3.12", platform="linux_aarch64"),
            "torch has no ROCm builds for linux_aarch64 (ROCm wheels are x86_64 only)",
        ),
    ],
)
def test_unavailable_cells_get_a_sentence(cell: Cell, reason: str) -> None:
    assert KB.cell_unavailable_reason(cell) == reason


def test_aarch64_cuda_follows_pytorchs_own_index_and_explains_pypi() -> None:
    def reason(torch: str, accel: str) -> str | None:
        cell = Cell(torch=torch, accelerator=accel, python="3.12", platform="linux_aarch64")
        return KB.cell_unavailable_reason(cell)

    assert reason("2.7.1", "cu128") is None  # download.pytorch.org, not PyPI
    assert reason("2.11", "cu130") is None
    old = reason("2.3", "cu121")
    assert old is not None and "no CUDA builds for linux_aarch64" in old and "2.11 on PyPI" in old
    wrong = reason("2.7", "cu126")
    assert (
        wrong is not None and "built there: 12.8" in wrong and "CPU-only before torch 2.11" in wrong
    )


def test_available_cells_and_odd_inputs() -> None:
    assert (
        KB.cell_unavailable_reason(Cell(torch="2.11.0", accelerator="cu126", python="3.14")) is None
    )
    assert (
        KB.cell_unavailable_reason(Cell(torch="2.6", accelerator="rocm6.2.4", python="3.9")) is None
    )
    # free-threaded cells: their own tag, per release (and per patch: 2.12.1 dropped 3.13t)
    assert KB.cell_unavailable_reason(Cell(torch="2.9", accelerator="cpu", python="3.13t")) is None
    ft = KB.cell_unavailable_reason(Cell(torch="2.6", accelerator="cpu", python="3.13t"))
    assert ft == "torch 2.6 has no free-threaded Python 3.13t wheels (free-threaded: none)"
    dropped = KB.cell_unavailable_reason(Cell(torch="2.12.1", accelerator="cpu", python="3.13t"))
    assert dropped is not None and "(free-threaded: 3.14t)" in dropped
    bad = KB.cell_unavailable_reason(Cell(torch="2.9", accelerator="cuda", python="3.12"))
    assert bad is not None and "is not an accelerator" in bad
    win = KB.cell_unavailable_reason(
        Cell(torch="2.9", accelerator="cpu", python="3.12", platform="win_amd64")
    )
    assert win is not None and "not supported" in win


PYPI_CELLS = [
    (minor, python, platform)
    for minor, release in KB.torch.items()
    for platform in PLATFORMS
    for python in (release.aarch64.python or release.python)
    if platform == "linux_aarch64" or python in release.python
]


@given(st.sampled_from(PYPI_CELLS))
def test_every_listed_python_has_cpu_and_the_pypi_cuda(case: tuple[str, str, str]) -> None:
    minor, python, platform = case
    release = KB.torch[minor]
    pypi = release.pypi_cuda if platform == "linux_x86_64" else release.aarch64.pypi_cuda
    for accel in ["cpu"] + ([cu(pypi)] if pypi else []):
        for torch in (minor, *release.patches):
            cell = Cell(torch=torch, accelerator=accel, python=python, platform=platform)
            assert KB.cell_unavailable_reason(cell) is None, cell.id


# -- arch lists ---------------------------------------------------------------------------------
def test_cuda_arch_list_defaults() -> None:
    assert KB.cuda("13.0").arch_list["linux_x86_64"] == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert KB.cuda("cu130").arch_list["linux_aarch64"] == "8.0;9.0;10.0;11.0;12.0+PTX"
    assert KB.cuda("12.8").arch_list["linux_x86_64"] == "7.0;7.5;8.0;8.6;9.0;10.0;12.0"
    assert KB.cuda("12.6").arch_list["linux_x86_64"] == "5.0;6.0;7.0;7.5;8.0;8.6;9.0"
    assert KB.default_arch_list("2.11", Accelerator.parse("cu130"), "linux_x86_64") == (
        "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    )
    assert KB.default_arch_list("2.11", A("rocm7.2"), "linux_x86_64").startswith("gfx900;gfx906;")
    with pytest.raises(ValueError, match="no device arch list"):
        KB.default_arch_list("2.11", A("cpu"), "linux_x86_64")
    with pytest.raises(LookupError, match=r"CUDA 10\.2 is not in the knowledge base"):
        KB.cuda("10.2")


def test_arch_12_0_is_rejected_by_torch_2_6_only() -> None:
    assert KB.unaccepted_archs("2.6", "8.0;9.0;12.0") == ("12.0",)
    assert KB.unaccepted_archs("2.6", "8.0;12.0+PTX") == ("12.0+PTX",)
    assert KB.unaccepted_archs("2.7", "8.0;9.0;12.0+PTX") == ()


def test_unaccepted_archs_parses_like_cpp_extension() -> None:
    assert KB.unaccepted_archs("2.11", "Ampere Hopper") == ()  # named arches, space-separated
    assert KB.unaccepted_archs("2.11", "10.0f;9.0") == ("10.0f",)  # family suffix never accepted
    assert KB.unaccepted_archs("2.8", "10.1") == ()
    assert KB.unaccepted_archs("2.9", "10.1") == ("10.1",)  # renamed to 11.0 (Thor)
    assert KB.unaccepted_archs("2.8", "native") == ("native",)
    assert KB.unaccepted_archs("2.9", "native") == ()
    assert KB.unaccepted_archs("2.11", "8.0;;9.0") == ("",)


def test_default_arch_lists_are_accepted_by_their_torch() -> None:
    for minor, release in KB.torch.items():
        for platform, cudas in (
            ("linux_x86_64", release.cuda),
            ("linux_aarch64", release.aarch64.cuda),
        ):
            for cuda in cudas:
                archs = KB.default_arch_list(minor, A(cu(cuda)), platform)
                assert KB.unaccepted_archs(minor, archs) == (), (minor, cuda, platform)


def test_default_arch_list_moves_ptx_to_the_newest_kept_arch() -> None:
    # No CUDA 13 variant of torch 2.6 exists, but the filter must still keep a PTX target.
    assert KB.default_arch_list("2.6", A("cu130"), "linux_x86_64") == "7.5;8.0;8.6;9.0;10.0+PTX"


# -- images, toolkits, never-bundle -------------------------------------------------------------
@pytest.mark.parametrize(
    ("torch", "accel", "platform", "image"),
    [
        ("2.11", "cu130", "linux_x86_64", "pytorch/manylinux2_28-builder:cuda13.0"),
        ("2.7", "cpu", "linux_x86_64", "pytorch/manylinux2_28-builder:cpu"),
        ("2.9", "rocm6.4", "linux_x86_64", "pytorch/manylinux2_28-builder:rocm6.4"),
        ("2.6", "cu126", "linux_x86_64", "pytorch/manylinux2_28-builder:cuda12.6"),
        ("2.6", "cu124", "linux_x86_64", "pytorch/manylinux-builder:cuda12.4"),
        ("2.6", "rocm6.2.4", "linux_x86_64", "pytorch/manylinux2_28-builder:rocm6.2.4"),
        ("2.4", "cpu", "linux_x86_64", "pytorch/manylinux-builder:cpu"),
        ("2.0", "rocm5.4.2", "linux_x86_64", "pytorch/manylinux-builder:rocm5.4.2"),
        ("2.11", "cu130", "linux_aarch64", "pytorch/manylinuxaarch64-builder:cuda13.0"),
        ("2.6", "cpu", "linux_aarch64", "pytorch/manylinux2_28_aarch64-builder:cpu-aarch64"),
        ("2.5", "cpu", "linux_aarch64", "pytorch/manylinuxaarch64-builder:cpu-aarch64"),
    ],
)
def test_builder_images(torch: str, accel: str, platform: str, image: str) -> None:
    assert KB.builder_image(torch, Accelerator.parse(accel), platform) == image


def test_every_available_cell_has_a_builder_image() -> None:
    for minor, release in KB.torch.items():
        x86 = ["cpu"] + [cu(c) for c in release.cuda] + [f"rocm{r}" for r in release.rocm]
        for accel in x86:
            assert KB.builder_image(minor, A(accel))
        for accel in ["cpu"] + [cu(c) for c in release.aarch64.cuda]:
            assert KB.builder_image(minor, A(accel), "linux_aarch64")
    with pytest.raises(LookupError, match="no builder image"):
        KB.builder_image("2.11", A("rocm7.2"), "linux_aarch64")


def test_toolkit_requirements_pin_every_component_to_torchs_cuda() -> None:
    assert KB.toolkit_requirements("2.11.0", Accelerator.parse("cu130")) == (
        "cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.2",
    )
    assert KB.toolkit_requirements("2.13", A("cu130")) == (
        "cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.0.3",
    )
    assert KB.toolkit_requirements("2.13", A("cu132")) == (
        "cuda-toolkit[nvcc,crt,cccl,cudart,nvvm]==13.2.*",
    )
    assert KB.toolkit_requirements("2.8", A("cu128")) == (
        "nvidia-cuda-nvcc-cu12==12.8.*",
        "nvidia-cuda-runtime-cu12==12.8.*",
        "nvidia-cuda-cccl-cu12==12.8.*",
    )
    assert KB.toolkit_requirements("2.11", A("cpu")) == ()
    assert KB.toolkit_requirements("2.11", A("rocm7.2")) == ()
    for cuda in KB.cuda_releases.values():
        if cuda.version.startswith("13."):
            assert cuda.pip_complete and "nvvm" in cuda.toolkit[0]  # M1 in docs/sources.md
        else:
            assert not cuda.pip_complete  # the cu11/cu12 nvcc wheels have no nvcc driver


@pytest.mark.parametrize(
    "soname",
    [
        "libtorch.so",
        "libtorch_cuda.so",
        "libc10.so",
        "libc10_hip.so",
        "libcudart.so.13",
        "libcublasLt.so.12",
        "libcuda.so.1",
        "libnvidia-ml.so.1",
        "libamdhip64.so.6",
        "libnccl.so.2",
    ],
)
def test_never_bundle_covers_torch_cuda_rocm_and_driver_libs(soname: str) -> None:
    assert any(fnmatch.fnmatchcase(soname, p) for p in KB.never_bundle)
    assert KB.never_bundle_reason(soname)


@pytest.mark.parametrize(
    ("soname", "group", "torch_own", "device"),
    [
        ("libtorch_cpu.so", "torch", True, False),
        ("libc10.so", "torch", True, False),
        ("libtorch_cuda.so", "torch-cuda", True, True),
        ("libc10_cuda.so", "torch-cuda", True, True),
        ("libcaffe2_nvrtc.so", "torch-cuda", True, True),
        ("libc10_hip.so", "torch-rocm", True, True),
        ("libcudart.so.13", "cuda", False, True),
        ("librocsolver.so.0", "rocm", False, True),
        ("libcuda.so.1", "driver", False, True),
    ],
)
def test_never_bundle_rule_groups(soname: str, group: str, torch_own: bool, device: bool) -> None:
    rule = KB.never_bundle_rule(soname)
    assert rule is not None
    assert (rule.group, rule.torch_own, rule.device) == (group, torch_own, device)


@pytest.mark.parametrize("soname", ["libstdc++.so.6", "libpython3.12.so.1.0", "libmyext.so"])
def test_never_bundle_leaves_other_libs_alone(soname: str) -> None:
    assert KB.never_bundle_reason(soname) is None


# -- broken data --------------------------------------------------------------------------------
@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(DATA_DIR, target)
    return target


def corrupt(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_copy_of_the_data_loads_uncached(data_copy: Path) -> None:
    copy = load_knowledge(data_copy)
    assert copy is not KB and list(copy.torch) == list(KB.torch)


def test_bad_field_value_names_file_line_row_and_field(data_copy: Path) -> None:
    corrupt(data_copy / "torch.yaml", "cxx11_abi: false", "cxx11_abi: maybe")
    with pytest.raises(KnowledgeError) as err:
        load_knowledge(data_copy)
    message = str(err.value)
    assert re.search(r"torch\.yaml:\d+: releases\[0\] \(minor 2\.0\): cxx11_abi: ", message), (
        message
    )


def test_missing_source_is_reported(data_copy: Path) -> None:
    corrupt(
        data_copy / "rocm.yaml",
        '    source: "R27 pytorch/pytorch .ci/docker/manywheel/build.sh@027375bf (TheRock',
        '    sauce: "R27 (TheRock',
    )
    with pytest.raises(KnowledgeError) as err:
        load_knowledge(data_copy)
    message = str(err.value)
    assert "rocm.yaml" in message and "(version 7.14): source: Field required" in message
    assert "(version 7.14): sauce: Extra inputs are not permitted" in message


def test_cross_file_reference_is_checked(data_copy: Path) -> None:
    corrupt(
        data_copy / "torch.yaml", 'cuda: ["11.8", "12.1", "12.4"]', 'cuda: ["11.8", "12.1", "12.3"]'
    )
    with pytest.raises(
        KnowledgeError,
        match=r"torch\.yaml:\d+: releases\[4\] \(minor 2\.4\): cuda: no row in cuda\.yaml for CUDA",
    ):
        load_knowledge(data_copy)


def test_inconsistent_row_is_reported(data_copy: Path) -> None:
    corrupt(data_copy / "cuda.yaml", '"nvidia-cuda-nvcc-cu12==12.8.*"', '"nvidia-cuda-nvcc-cu12"')
    with pytest.raises(
        KnowledgeError,
        match=r"cuda\.yaml:\d+: releases\[5\] \(version 12\.8\): toolkit: .* must be pinned",
    ):
        load_knowledge(data_copy)


def test_a_shadowed_never_bundle_row_is_rejected(data_copy: Path) -> None:
    # a broad libtorch*.so* above the torch-cuda row would claim libtorch_cuda.so from it
    corrupt(
        data_copy / "never_bundle.yaml", 'pattern: "libtorch_cuda*.so*"', 'pattern: "libtorch*.so*"'
    )
    with pytest.raises(
        KnowledgeError,
        match=r"never_bundle\.yaml:\d+: patterns\[4\] \(pattern libtorch\*\.so\*\): pattern: "
        r"shadowed by the earlier 'libtorch\*\.so\*'",
    ):
        load_knowledge(data_copy)


def test_unparsable_yaml_names_the_file(data_copy: Path) -> None:
    (data_copy / "images.yaml").write_text("images: [\n", encoding="utf-8")
    with pytest.raises(KnowledgeError, match=r"images\.yaml:\d+: not valid YAML"):
        load_knowledge(data_copy)


def test_missing_file_names_the_file(data_copy: Path) -> None:
    (data_copy / "never_bundle.yaml").unlink()
    with pytest.raises(KnowledgeError, match=r"never_bundle\.yaml: cannot read"):
        load_knowledge(data_copy)


# -- ecosystem facts (data/ecosystem.json, read with the standard library only) ----------------
def test_ecosystem_facts_load_and_are_cached() -> None:
    eco = load_ecosystem()
    assert load_ecosystem() is eco
    assert eco.pytorch_index == "https://download.pytorch.org/whl"
    assert list(eco.manylinux_aliases) == ["manylinux2014", "manylinux2010", "manylinux1"]
    assert eco.manylinux_aliases["manylinux2014"] == (2, 17)
    assert {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_USER"} <= set(eco.dropped_env)
    assert eco.default_runner == "ubuntu-24.04"
    assert eco.nvcc_options_since == {"--compress-mode": "12.8", "-frandom-seed": "13.0"}
    assert all(source.strip() for source in eco.sources.values())


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"manylinux2010": "2.12"', '"manylinux2010": "2.20"', "newest glibc first"),
        ('"label": "ubuntu-24.04"', '"label": "ubuntu 24"', "default_runner.label: expected"),
        ('"source": "R38', '"sauce": "R38', "manylinux_aliases.sauce: unknown key"),
        ('"url": "https://download.pytorch.org/whl"', '"url": "http://x/"', "pytorch_index.url"),
        ('"PIP_USER": "makes', '"PIP USER": "makes', "each entry needs a name"),
        ('"-frandom-seed": "13.0"', '"-frandom-seed": "13"', "nvcc_options_since.versions"),
    ],
)
def test_broken_ecosystem_data_is_reported(
    data_copy: Path, old: str, new: str, message: str
) -> None:
    corrupt(data_copy / ECOSYSTEM_FILE.name, old, new)
    with pytest.raises(KnowledgeError, match=re.escape(message)) as err:
        load_ecosystem(data_copy / ECOSYSTEM_FILE.name)
    assert "ecosystem.json" in str(err.value)


def test_ecosystem_data_that_is_not_json_names_the_file_and_line(data_copy: Path) -> None:
    (data_copy / ECOSYSTEM_FILE.name).write_text('{\n  "about": [\n', encoding="utf-8")
    with pytest.raises(KnowledgeError, match=r"ecosystem\.json:\d+: not valid JSON"):
        load_ecosystem(data_copy / ECOSYSTEM_FILE.name)
