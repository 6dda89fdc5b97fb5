"""The release's publishing steps against an in-memory GitHub: the smoke-gated selection,
idempotent release assets, the published record, the restore from it, PyPI files and the
status job's verdict (no process, no socket)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fixtures.attestations import AttestedRunner
from fixtures.crafted import make_wheel
from fixtures.fakegh import FakeGitHub

from buildtools.cisteps.assets import (
    SmokeBinding,
    built_wheels,
    missing_assets,
    read_selection,
    reported_smoke,
    select_wheels,
    upload_assets,
)
from buildtools.cisteps.published_record import (
    RecordPolicy,
    compare_record,
    latest_record,
    upload_record,
)
from buildtools.cisteps.restore import restore_from_record
from buildtools.cisteps.verdict import run_status, status_markdown
from buildtools.cli.main import _extra_verbs, build_parser, main
from buildtools.errors import ImmutableWheelError, PublishError
from buildtools.index.manifest import read_manifest
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

KB = load_knowledge()
BASE = "https://example.github.io/bt-scatter/whl"
RELEASES = "https://github.com/example/bt-scatter/releases/download"
# the record's own checks (no attestation here: tests/unit/test_ci_record.py has those)
POLICY = RecordPolicy(prefixes=(f"{RELEASES}/",), authenticate=None)


def _record(gh: FakeGitHub, tag: str, manifest: Path) -> None:
    """`manifest` as the record of the published release of `tag` (its publish job's)."""
    release = gh.release(tag) or gh.create_release(tag)
    release["draft"] = False
    upload_record(gh, release, manifest)


def _wheel(directory: Path, version: str, tag: str = "cp312-cp312-manylinux_2_28_x86_64") -> Path:
    record = json.dumps(
        {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    ).encode()
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag=tag,
        files={"bt_scatter/__init__.py": f"{version} {tag}".encode()},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": record},
    )


def _report(path: Path, wheels: dict[Path, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    results = [
        {"wheel": w.name, "sha256": hashlib.sha256(w.read_bytes()).hexdigest(), "status": s}
        for w, s in wheels.items()
    ]
    path.write_text(json.dumps({"schema": "torch-buildtools/smoke-report/v1", "results": results}))
    return path


class DirFetcher:
    """Serves a directory at a URL (what Pages serves); missing files answer 404."""

    def __init__(self, base: str, root: Path) -> None:
        self.base, self.root, self.urls = base, root, []

    def fetch(self, url: str, dest: Path, *, max_bytes: int) -> bool:
        from urllib.parse import unquote

        self.urls.append(url)
        path = self.root / unquote(url.removeprefix(self.base + "/").split("?", 1)[0])
        if not path.is_file():
            return False
        dest.write_bytes(path.read_bytes())
        return True


# -- the selection ----------------------------------------------------------------------------


def test_select_keeps_the_smoke_passed_wheels_with_their_jobs(tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    ok = _wheel(arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu")
    bad = _wheel(
        arts / "wheels-torch2.13.0-cpu-cp313", "0.1.0+pt213cpu", "cp313-cp313-linux_x86_64"
    )
    untested = _wheel(arts / "wheels-torch2.13.0-rocm7.2-cp312", "0.1.0+pt213rocm72")
    report = _report(tmp_path / "smoke" / "report.json", {ok: "passed", bad: "segfault"})
    selection = select_wheels(arts, [report], tmp_path / "selected")
    assert [(w, j) for w, _, j in selection.published] == [(ok.name, "torch2.13.0-cpu-cp312")]
    held = {w: (j, r) for w, j, r in selection.held_back}
    assert held[bad.name] == ("torch2.13.0-cpu-cp313", "smoke segfault")
    assert held[untested.name] == ("torch2.13.0-rocm7.2-cp312", "smoke not run")
    assert [p.name for p in (tmp_path / "selected").iterdir()] == [ok.name]
    # written and read back as the status job reads it
    (tmp_path / "selection.json").write_text(selection.to_json())
    assert read_selection(tmp_path / "selection.json") == selection
    assert (
        select_wheels(arts, [], tmp_path / "none").held_back[0][2] == "no smoke report in this run"
    )


def test_select_takes_only_what_the_build_jobs_reported(tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    ok = _wheel(arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu")
    sha = hashlib.sha256(ok.read_bytes()).hexdigest()
    report = _report(tmp_path / "smoke" / "report.json", {ok: "passed"})
    outputs = json.dumps({"wheels_0": f"{sha}:{ok.name} ", "wheels_1": ""})
    built = built_wheels([outputs, json.dumps({})])
    assert built == {ok.name: sha}
    assert select_wheels(arts, [report], tmp_path / "a", built=built).published
    # a wheel (with its own passing report) that no build leg reported: stop, name it
    planted = _wheel(arts / "wheels-evil", "0.1.0+pt213cpu", "cp311-cp311-manylinux_2_28_x86_64")
    planted_report = _report(tmp_path / "smoke2" / "report.json", {planted: "passed"})
    with pytest.raises(PublishError, match="no build job of this run reported a wheel of this"):
        select_wheels(arts, [report, planted_report], tmp_path / "b", built=built)
    # the same name with other bytes than the build made
    planted.unlink()
    ok.write_bytes(ok.read_bytes() + b"\0")
    with pytest.raises(PublishError, match=f"made these bytes \\(it reported {sha}\\)"):
        select_wheels(arts, [report], tmp_path / "c", built=built)
    for bad in ('{"wheels_0": "nothex:x.whl"}', "[1]", "not json"):
        with pytest.raises(PublishError):
            built_wheels([bad])


def test_a_smoke_report_counts_only_for_its_own_familys_wheels(tmp_path: Path) -> None:
    """A report is bound to the smoke leg that output its sha256, and vouches only for the
    wheels of that leg's family: a compromised GPU machine cannot pass another family's
    wheels, a family without a smoke runner is never passed, and a report no leg reported
    stops the publish."""
    arts = tmp_path / "artifacts"
    cpu = _wheel(arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu")
    cuda = _wheel(arts / "wheels-torch2.13.0-cu130-cp312", "0.1.0+pt213cu130")
    rocm = _wheel(arts / "wheels-torch2.13.0-rocm7.2-cp312", "0.1.0+pt213rocm72")
    sha = {w: hashlib.sha256(w.read_bytes()).hexdigest() for w in (cpu, cuda, rocm)}
    # the CUDA machine's own report passes every wheel it can see, the other families' too
    cuda_report = _report(tmp_path / "smoke-cuda" / "report.json", {cpu: "passed", cuda: "passed", rocm: "passed"})  # fmt: skip
    cpu_report = _report(tmp_path / "smoke-cpu" / "report.json", {cpu: "segfault"})
    digest = {r: hashlib.sha256(r.read_bytes()).hexdigest() for r in (cuda_report, cpu_report)}
    bound = reported_smoke(
        [
            ("cuda", json.dumps({"report_0": digest[cuda_report], "report_1": ""})),
            ("cpu", json.dumps({"report_0": digest[cpu_report]})),
        ]
    )
    assert bound == {digest[cuda_report]: "cuda", digest[cpu_report]: "cpu"}
    binding = SmokeBinding(
        reports=bound, wheels={cpu.name: "cpu", cuda.name: "cuda", rocm.name: "rocm"}
    )
    built = {w.name: sha[w] for w in (cpu, cuda, rocm)}
    selection = select_wheels(
        arts, [cuda_report, cpu_report], tmp_path / "sel", built=built, binding=binding
    )
    assert [w for w, _, _ in selection.published] == [cuda.name]
    held = {w: r for w, _, r in selection.held_back}
    assert held[cpu.name] == "smoke segfault"  # its own family's report failed it
    assert held[rocm.name] == "no smoke report of the rocm family in this run"
    # without the binding the CUDA report's pass would have let the ROCm wheel through
    loose = select_wheels(arts, [cuda_report], tmp_path / "loose")
    assert rocm.name in {w for w, _, _ in loose.published}
    # a report no smoke leg reported (another family's artifact, rewritten): stop
    cpu_report.write_text(cpu_report.read_text().replace("segfault", "passed"))
    with pytest.raises(PublishError, match="no smoke leg of this run reported a report"):
        select_wheels(arts, [cpu_report], tmp_path / "forged", built=built, binding=binding)
    # one digest claimed by two families, or not a digest at all
    with pytest.raises(PublishError, match="reported by a cuda and a cpu smoke leg"):
        reported_smoke([("cuda", '{"report_0": "' + "a" * 64 + '"}'),
                        ("cpu", '{"report_3": "' + "a" * 64 + '"}')])  # fmt: skip
    with pytest.raises(PublishError, match="is not a sha256"):
        reported_smoke([("cpu", '{"report_0": "passed"}')])


def test_select_binds_reports_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arts = tmp_path / "artifacts"
    cpu = _wheel(arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu")
    report = _report(tmp_path / "smoke-cpu" / "report.json", {cpu: "passed"})
    sha = hashlib.sha256(cpu.read_bytes()).hexdigest()
    monkeypatch.setenv("BUILT", json.dumps({"wheels_0": f"{sha}:{cpu.name}"}))
    monkeypatch.setenv(
        "SMOKED", json.dumps({"report_0": hashlib.sha256(report.read_bytes()).hexdigest()})
    )
    base = ["ci", "select", str(arts), "--selection", str(tmp_path / "s.json")]
    gate = ["--require-smoke", str(report)]
    assert main([*base, "--out", str(tmp_path / "a"), "--built-env", "cpu=BUILT",
                 "--smoked-env", "cpu=SMOKED", *gate]) == 0  # fmt: skip
    assert (tmp_path / "a" / cpu.name).is_file()
    # bound to the CUDA family: the CPU wheel is not passed by it
    assert main([*base, "--out", str(tmp_path / "b"), "--built-env", "cpu=BUILT",
                 "--smoked-env", "cuda=SMOKED", *gate]) == 0  # fmt: skip
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").iterdir())
    # binding needs each build's family
    assert main([*base, "--out", str(tmp_path / "c"), "--built-env", "BUILT",
                 "--smoked-env", "cpu=SMOKED", *gate]) == 10  # fmt: skip


def test_select_refuses_two_wheels_of_one_name(tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    first = _wheel(arts / "wheels-a", "0.1.0+pt213cpu")
    other = arts / "wheels-b" / first.name
    other.parent.mkdir()
    _wheel(tmp_path / "x", "0.1.0+pt213cpu", "cp312-cp312-manylinux_2_28_x86_64")
    other.write_bytes(first.read_bytes() + b"\0")  # the same name, other bytes
    report = _report(tmp_path / "r.json", {first: "passed", other: "passed"})
    with pytest.raises(ImmutableWheelError, match="two downloaded wheels of this name differ"):
        select_wheels(arts, [report], tmp_path / "selected")


def test_select_expect_catches_a_changed_artifact(tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    ok = _wheel(arts / "wheels-a", "0.1.0+pt213cpu")
    report = _report(tmp_path / "r.json", {ok: "passed"})
    first = ["ci", "select", str(arts), "--out", str(tmp_path / "s1"), "--selection"]
    assert main([*first, str(tmp_path / "one.json"), "--require-smoke", str(report)]) == 0
    second = ["ci", "select", str(arts), "--out", str(tmp_path / "s2"), "--selection"]
    code = main(
        [*second, str(tmp_path / "two.json"), "--expect", str(tmp_path / "one.json")],
        out=io.StringIO(),
    )
    # no report this time: nothing selected, unlike what the assets job uploaded
    assert code == ImmutableWheelError.exit_code


# -- release assets ---------------------------------------------------------------------------


def test_uploads_are_idempotent_and_resumable(tmp_path: Path) -> None:
    gh = FakeGitHub()
    wheels = [
        _wheel(tmp_path / "w", "0.1.0+pt213cpu", f"cp31{m}-cp31{m}-linux_x86_64") for m in (1, 2, 3)
    ]
    gh.fail_upload_after = 1  # the second upload drops: a half-finished asset stays
    with pytest.raises(PublishError, match="connection reset"):
        upload_assets(gh, "v0.1.0", wheels)
    assert gh.calls[:2] == ["release v0.1.0", "create v0.1.0"]
    # re-running the job (or "re-run failed jobs") finishes the upload
    result = upload_assets(gh, "v0.1.0", wheels)
    assert result.present == (wheels[0].name,)
    assert result.replaced == (wheels[1].name,)
    assert result.uploaded == (wheels[1].name, wheels[2].name)
    # and once more: nothing to do
    again = upload_assets(gh, "v0.1.0", wheels)
    assert again.present == tuple(w.name for w in wheels) and not again.uploaded
    # a rebuilt wheel with other bytes under a published name never replaces it
    rebuilt = tmp_path / "rebuilt" / wheels[0].name
    rebuilt.parent.mkdir()
    rebuilt.write_bytes(wheels[0].read_bytes() + b"\0")
    with pytest.raises(ImmutableWheelError, match="published files never change"):
        upload_assets(gh, "v0.1.0", [rebuilt])


def test_uploads_compare_bytes_when_github_has_no_digest(tmp_path: Path) -> None:
    gh = FakeGitHub(digests=False)
    wheel = _wheel(tmp_path / "w", "0.1.0+pt213cpu")
    upload_assets(gh, "v0.1.0", [wheel])
    assert upload_assets(gh, "v0.1.0", [wheel]).present == (wheel.name,)
    assert f"download {wheel.name}" in gh.calls


def test_missing_assets_before_pages_point_at_them(tmp_path: Path) -> None:
    gh = FakeGitHub()
    wheel = _wheel(tmp_path / "w", "0.1.0+pt213cpu")
    site = tmp_path / "site"
    url = f"{RELEASES}/v0.1.0/"
    publish(site, [read_wheel(wheel, wheel_url_template=url + "{filename}")], IndexSettings(), KB)
    manifest = read_manifest(site)
    assert missing_assets(gh, "v0.1.0", manifest, url) == [
        f"{wheel.name}: not an uploaded asset of the release v0.1.0"
    ]
    upload_assets(gh, "v0.1.0", [wheel])
    assert missing_assets(gh, "v0.1.0", manifest, url) == []


# -- the published record ---------------------------------------------------------------------


def _site(tmp_path: Path, name: str, *wheels: tuple[Path, str]) -> Path:
    site = tmp_path / name
    for wheel, tag in wheels:
        src = read_wheel(wheel, wheel_url_template=f"{RELEASES}/{tag}/" + "{filename}")
        publish(site, [src], IndexSettings(base_url=BASE), KB)
    return site


def test_the_record_is_the_newest_index_json_asset(tmp_path: Path) -> None:
    gh = FakeGitHub()
    assert latest_record(gh, POLICY) is None
    one = _wheel(tmp_path / "1", "0.1.0+pt213cpu")
    two = _wheel(tmp_path / "2", "0.2.0+pt213cpu")
    first = _site(tmp_path, "s1", (one, "v0.1.0"))
    second = _site(tmp_path, "s2", (one, "v0.1.0"), (two, "v0.2.0"))
    _record(gh, "v0.2.0", second / "index.json")
    _record(gh, "v0.1.0", first / "index.json")  # a re-run of an older tag, later
    record = latest_record(gh, POLICY)
    assert record is not None and record.tag == "v0.1.0"
    _record(gh, "v0.2.0", second / "index.json")  # replaces that release's record
    record = latest_record(gh, POLICY)
    assert record is not None and record.tag == "v0.2.0"
    assert {w.filename for w in record.manifest.wheels} == {one.name, two.name}
    assert [a["name"] for a in gh.release("v0.2.0")["assets"]].count("index.json") == 1  # type: ignore[index]


def test_restore_from_the_record_checked_against_the_live_site(tmp_path: Path) -> None:
    gh = FakeGitHub()
    one = _wheel(tmp_path / "1", "0.1.0+pt213cpu")
    two = _wheel(tmp_path / "2", "0.2.0+pt213cpu")
    served = _site(tmp_path, "served", (one, "v0.1.0"))  # the CDN still serves v0.1.0
    recorded = _site(tmp_path, "recorded", (one, "v0.1.0"), (two, "v0.2.0"))
    _record(gh, "v0.2.0", recorded / "index.json")
    fetcher = DirFetcher(BASE, served)
    restored = restore_from_record(
        latest_record(gh, POLICY),
        tmp_path / "pages" / "whl",
        base_url=BASE,
        fetcher=fetcher,
        scratch=tmp_path / "scratch",
        cache_bust="42",
    )
    # the record wins over the stale CDN: the v0.2.0 wheel is not dropped
    names = {w.filename for w in read_manifest(restored.site).wheels}
    assert names == {one.name, two.name}
    assert restored.notes == (f"{two.name}: in the record, not served yet",)
    assert fetcher.urls == [f"{BASE}/index.json?v=42"]  # a fresh copy, and no wheel download
    # the live site lists a wheel the record does not: deployed without recording, stop
    rogue = _site(
        tmp_path, "rogue", (one, "v0.1.0"), (_wheel(tmp_path / "3", "0.3.0+pt213cpu"), "v0.3.0")
    )
    with pytest.raises(PublishError, match="does not list"):
        restore_from_record(
            latest_record(gh, POLICY),
            tmp_path / "again",
            base_url=BASE,
            fetcher=DirFetcher(BASE, rogue),
            scratch=tmp_path / "scratch2",
        )


def test_restore_without_a_record(tmp_path: Path) -> None:
    one = _wheel(tmp_path / "1", "0.1.0+pt213cpu")
    served = _site(tmp_path, "served", (one, "v0.1.0"))
    adopted = restore_from_record(
        None,
        tmp_path / "a",
        base_url=BASE,
        fetcher=DirFetcher(BASE, served),
        scratch=tmp_path / "s",
    )
    assert not adopted.first_publish and adopted.wheels == 1
    assert "no published record in the releases yet" in adopted.notes[0]
    first = restore_from_record(
        None,
        tmp_path / "b",
        base_url=BASE,
        fetcher=DirFetcher(BASE, tmp_path / "x"),
        scratch=tmp_path / "t",
    )
    assert first.first_publish


def test_compare_record() -> None:
    from buildtools.index.manifest import IndexedWheel, Manifest

    def w(name: str, sha: str) -> IndexedWheel:
        return IndexedWheel(
            filename=name, sha256=sha, size=1, name="x", version="1", requires_python=None,
            metadata_sha256=sha, torch="2.13.0", torch_versions=("2.13.0",),
            torch_specifier=None, accelerator="cpu",
        )  # fmt: skip

    a, b = "a" * 64, "b" * 64
    record = Manifest(wheels=(w("x-1-py3-none-any.whl", a),))
    assert compare_record(record, record) == ([], [])
    served = Manifest(wheels=(w("x-1-py3-none-any.whl", b),))
    problems, _ = compare_record(record, served)
    assert problems == [f"x-1-py3-none-any.whl: served with sha256 {b}, the record has {a}"]


def test_restore_and_record_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from buildtools.cli.ci.record import cmd_record
    from buildtools.cli.ci.restore_site import cmd_restore_site

    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    monkeypatch.setenv("BT_DEFAULT_BRANCH", "main")
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    gh = FakeGitHub()
    gh_out = tmp_path / "out"
    parser = build_parser(_extra_verbs())
    args = parser.parse_args(
        ["ci", "restore-site", "--site", str(tmp_path / "_site"), "--from-releases",
         "--github-output", str(gh_out)]
    )  # fmt: skip
    out = io.StringIO()
    runner = AttestedRunner()
    fetcher = DirFetcher(BASE, tmp_path / "none")
    assert cmd_restore_site(args, out, fetcher=fetcher, api=gh, runner=runner) == 0
    site = tmp_path / "_site" / "whl"
    # the record the site was merged into (none yet): the signing job checks it is the newest
    assert gh_out.read_text() == f"path={site}\nrecord=none\n"
    assert "first publish" in out.getvalue()
    wheel = _wheel(tmp_path / "w", "0.1.0+pt213cpu")
    url = f"{RELEASES}/v0.1.0/"
    publish(site, [read_wheel(wheel, wheel_url_template=url + "{filename}")], IndexSettings(), KB)
    record = parser.parse_args(
        ["ci", "record", "--tag", "v0.1.0", "--site", str(site), "--url-prefix", url, "--publish"]
    )
    with pytest.raises(PublishError, match="does not hold"):
        cmd_record(record, io.StringIO(), api=gh)
    upload_assets(gh, "v0.1.0", [wheel])
    # the release stays a draft until its record is uploaded: no record to adopt yet
    assert gh.release("v0.1.0")["draft"] is True  # type: ignore[index]
    assert latest_record(gh, POLICY) is None
    out = io.StringIO()
    assert cmd_record(record, out, api=gh) == 0
    assert "release v0.1.0: published" in out.getvalue()
    assert gh.release("v0.1.0")["draft"] is False  # type: ignore[index]
    assert latest_record(gh, POLICY) is not None
    # a re-run: the record is replaced, the release is published already
    out = io.StringIO()
    assert cmd_record(record, out, api=gh) == 0
    assert "published already" in out.getvalue()


# -- PyPI ---------------------------------------------------------------------------------------


def test_pypi_dist_strips_the_local_label_of_the_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Path(__file__).resolve().parents[2]
    text = (
        repo / "matrix.yaml"
    ).read_text() + "ci:\n  pypi: {torch: '2.13.0', accelerator: cu130}\n"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text.replace("path: examples/scatter", f"path: {repo / 'examples/scatter'}"))
    arts = tmp_path / "artifacts"
    cu = _wheel(arts / "wheels-torch2.13.0-cu130-cp312", "0.1.0+pt213cu130")
    cpu = _wheel(
        arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu", "cp312-cp312-linux_x86_64"
    )
    sel = select_wheels(
        arts, [_report(tmp_path / "r.json", {cu: "passed", cpu: "passed"})], tmp_path / "s"
    )
    (tmp_path / "selection.json").write_text(sel.to_json())
    code = main(
        ["ci", "pypi-dist", str(arts), "--selection", str(tmp_path / "selection.json"),
         "--out", str(tmp_path / "dist"), "--matrix", str(matrix)],
        out=io.StringIO(),
    )  # fmt: skip
    assert code == 0
    assert [p.name for p in (tmp_path / "dist").iterdir()] == [
        "bt_scatter-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    ]
    meta = read_wheel(next((tmp_path / "dist").iterdir()))
    assert meta.wheel.version == "0.1.0"


# -- the status job -------------------------------------------------------------------------------


def _needs(**results: str) -> dict[str, Any]:
    outputs = {"run_build_cpu": "true", "run_smoke_cpu": "true", "run_publish": "true",
               "run_images": "false"}  # fmt: skip
    needs: dict[str, Any] = {"plan": {"result": "success", "outputs": outputs}}
    for job, result in results.items():
        needs[job.replace("_", "-")] = {"result": result, "outputs": {}}
    return needs


def test_status_verdicts(tmp_path: Path) -> None:
    green = run_status(
        workflow="release",
        needs=_needs(images="skipped", build_cpu="success", smoke_cpu="success",
                     publish="success", pages="success"),
        entries=None,
        reports=tmp_path,
    )  # fmt: skip
    assert green.ok
    cancelled = run_status(
        workflow="release",
        needs=_needs(
            build_cpu="success", smoke_cpu="cancelled", publish="skipped", pages="skipped"
        ),
        entries=None,
        reports=tmp_path,
    )
    assert {j.job: j.why for j in cancelled.jobs if not j.ok} == {
        "smoke-cpu": "cancelled",
        "publish": "had work but did not run",
        "pages": "had work but did not run",
    }
    # the image job only saves time: the builds made their own images
    soft = run_status(
        workflow="release",
        needs=_needs(images="failure", build_cpu="success", smoke_cpu="success",
                     publish="success", pages="success"),
        entries=None,
        reports=tmp_path,
    )  # fmt: skip
    assert soft.ok
    # so does pushing them (a registry): it follows run_images, and its failure is soft
    pushed = _needs(images="success", push_images="failure", build_cpu="success",
                    smoke_cpu="success", publish="success", pages="success")  # fmt: skip
    pushed["plan"]["outputs"]["run_images"] = "true"
    verdicts = run_status(workflow="release", needs=pushed, entries=None, reports=tmp_path)
    assert verdicts.ok
    assert {j.job: j.why for j in verdicts.jobs}[
        "push-images"
    ] == "the builds made their own images"
    pushed["push-images"]["result"] = "skipped"
    assert not run_status(workflow="release", needs=pushed, entries=None, reports=tmp_path).ok
    # the PyPI jobs follow run_pypi: skipped without a PyPI variant in this release
    no_pypi = _needs(build_cpu="success", smoke_cpu="success", publish="success", pages="success")
    no_pypi["plan"]["outputs"]["run_pypi"] = "false"
    no_pypi["pypi-dist"] = no_pypi["pypi"] = {"result": "skipped", "outputs": {}}
    assert run_status(workflow="release", needs=no_pypi, entries=None, reports=tmp_path).ok
    no_pypi["plan"]["outputs"]["run_pypi"] = "true"
    assert not run_status(workflow="release", needs=no_pypi, entries=None, reports=tmp_path).ok


def test_status_summary_lists_published_held_back_and_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    arts = tmp_path / "artifacts"
    ok = _wheel(arts / "wheels-torch2.13.0-cpu-cp312", "0.1.0+pt213cpu")
    bad = _wheel(
        arts / "wheels-torch2.13.0-cpu-cp313", "0.1.0+pt213cpu", "cp313-cp313-linux_x86_64"
    )
    smoke = _report(reports / "smoke-torch2.13.0-cpu-cp313" / "report.json", {bad: "segfault"})
    passed = _report(reports / "smoke-torch2.13.0-cpu-cp312" / "report.json", {ok: "passed"})
    (reports / "selection").mkdir(parents=True)
    (reports / "selection" / "selection.json").write_text(
        select_wheels(arts, [smoke, passed], tmp_path / "sel").to_json()
    )
    entries = {
        "build": [],
        "smoke": [
            {
                "id": f"torch2.13.0-cpu-cp31{m}",
                "job": "smoke-cpu",
                "reproduce": f"B{m}",
                "smoke": "S",
            }
            for m in (2, 3)
        ],
        "skipped": [["torch2.13.0-rocm7.2-cp312", "no runners.smoke.rocm"]],
    }
    (reports / "plan").mkdir()
    (reports / "plan" / "entries.json").write_text(
        json.dumps({"schema": "torch-buildtools/ci-plan/v1", "workflow": "release", **entries})
    )
    needs = _needs(build_cpu="success", smoke_cpu="failure", publish="skipped", pages="skipped")
    monkeypatch.setenv("NEEDS", json.dumps(needs))
    gh_out, summary = tmp_path / "gh_out", tmp_path / "summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(gh_out))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = io.StringIO()
    assert main(["ci", "status", "--workflow", "release", "--reports", str(reports)], out=out) == 1
    text = out.getvalue()
    assert text == summary.read_text()
    assert "### Published: 0 wheel(s)" in text  # the publish job did not run
    assert f"- `{ok.name}` (`torch2.13.0-cpu-cp312`): selected, but the publish job skipped" in text
    assert f"- `{bad.name}` (`torch2.13.0-cpu-cp313`): smoke segfault; reproduce: `B3 && S`" in text
    assert "- `torch2.13.0-cpu-cp313`: smoke segfault; reproduce: `B3 && S`" in text
    assert "- `torch2.13.0-rocm7.2-cp312`: no runners.smoke.rocm" in text
    outputs = dict(line.split("=", 1) for line in gh_out.read_text().splitlines())
    assert outputs["state"] == "failure"
    assert outputs["description"].startswith("failed: smoke-cpu, publish, pages")
    assert os.environ["NEEDS"]
    assert status_markdown(
        run_status(workflow="release", needs=needs, entries=None, reports=reports)
    )
