"""The published record is adopted only when it is authenticated, and what a release
publishes carries its own attestation for the tag's commit and the run (issue 22, items 4
and 6). Against an in-memory GitHub and `gh attestation verify` answered as gh does
(`fixtures.attestations`); no process, no socket."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fixtures.attestations import AttestedRunner, certificate, published_record
from fixtures.crafted import make_wheel
from fixtures.fakegh import FakeGitHub

from buildtools.cisteps.provenance import (
    RELEASE_PREDICATE,
    Expect,
    Signer,
    check_verification,
    record_policy,
    release_predicate,
    subjects_text,
    verify_files,
)
from buildtools.cisteps.published_record import latest_record
from buildtools.cli.main import _extra_verbs, build_parser
from buildtools.context import RunContext
from buildtools.errors import ExitCode, PublishError, UntrustedRecordError
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

KB = load_knowledge()
REPO = "example/bt-scatter"
RELEASES = f"https://github.com/{REPO}/releases/download"
ENV = {"GITHUB_REPOSITORY": REPO, "BT_DEFAULT_BRANCH": "main"}
SIGNER = Signer(repository=REPO, default_branch="main")


def _site(tmp_path: Path, name: str, url: str) -> Path:
    wheel = make_wheel(
        tmp_path / f"w-{name}",
        name="bt_scatter",
        version="0.1.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": name.encode()},
        requires=["torch==2.13.*"],
        dist_info_files={
            "buildtools.json": json.dumps(
                {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
            ).encode()
        },
    )
    site = tmp_path / name
    publish(site, [read_wheel(wheel, wheel_url_template=url + "{filename}")], IndexSettings(), KB)
    return site / "index.json"


def _policy(runner: AttestedRunner, wheel_url: str | None = None):  # type: ignore[no-untyped-def]
    return record_policy(RunContext(processes=runner, env=ENV), wheel_url=wheel_url)


# -- which record is adopted -----------------------------------------------------------------


def test_an_authenticated_record_is_adopted(tmp_path: Path) -> None:
    gh, runner = FakeGitHub(), AttestedRunner()
    published_record(gh, runner, "v0.1.0", _site(tmp_path, "a", f"{RELEASES}/v0.1.0/"))
    record = latest_record(gh, _policy(runner))
    assert record is not None and record.tag == "v0.1.0" and len(record.manifest.wheels) == 1


def test_a_draft_release_is_never_the_record(tmp_path: Path) -> None:
    """An unfinished publish (or a planted draft) is skipped and named; the newest record
    of a published release is adopted."""
    gh, runner = FakeGitHub(), AttestedRunner()
    published_record(gh, runner, "v0.1.0", _site(tmp_path, "a", f"{RELEASES}/v0.1.0/"))
    newer = _site(tmp_path, "b", f"{RELEASES}/v0.2.0/")
    gh.put("v0.2.0", "index.json", newer.read_bytes(), draft=True)
    record = latest_record(gh, _policy(runner))
    assert record is not None and record.tag == "v0.1.0"
    assert record.skipped == ("v0.2.0",)
    only_draft = FakeGitHub()
    only_draft.put("v9.0.0", "index.json", newer.read_bytes(), draft=True)
    assert latest_record(only_draft, _policy(runner)) is None


def test_a_record_someone_uploaded_by_hand_stops_the_release(tmp_path: Path) -> None:
    gh, runner = FakeGitHub(), AttestedRunner()
    published_record(gh, runner, "v0.1.0", _site(tmp_path, "a", f"{RELEASES}/v0.1.0/"))
    planted = _site(tmp_path, "b", f"{RELEASES}/v0.1.0/")
    gh.put("v0.2.0", "index.json", planted.read_bytes(), uploader="mallory")
    with pytest.raises(UntrustedRecordError) as err:
        latest_record(gh, _policy(runner))
    assert err.value.exit_code == ExitCode.UNTRUSTED_RECORD == 19
    assert "index.json of the release v0.2.0 was uploaded by mallory, not by the release " in (
        str(err.value)
    )
    assert "nothing is published" in str(err.value)
    assert not runner.calls  # refused before anything is downloaded and verified


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("none", "gh attestation verify failed (exit 1)"),
        ("branch", "signer: 'https://github.com/example/bt-scatter/.github/workflows/release.yml"
         "@refs/heads/evil'"),
        ("self-hosted", "gh attestation verify failed"),
        ("other tag", "tag: 'v0.0.9', expected 'v0.2.0'"),
        ("other workflow", "gh attestation verify failed"),
    ],
)  # fmt: skip
def test_a_record_without_its_release_attestation_stops_the_release(
    tmp_path: Path, how: str, why: str
) -> None:
    """Uploaded by the bot identity is not enough: a workflow someone pushed to a branch
    uploads as github-actions[bot] too, but signs as that branch."""
    gh, runner = FakeGitHub(), AttestedRunner()
    record = _site(tmp_path, "a", f"{RELEASES}/v0.2.0/")
    data = record.read_bytes()
    gh.put("v0.2.0", "index.json", data)
    tag = "v0.0.9" if how == "other tag" else "v0.2.0"
    predicate = release_predicate(
        tag=tag, commit="c" * 40, repository=REPO, run_id="7", run_attempt="1"
    )
    cert = {
        "none": None,
        "branch": certificate(ref="refs/heads/evil"),
        "self-hosted": certificate(runner="self-hosted"),
        "other tag": certificate(),
        "other workflow": certificate(workflow=".github/workflows/evil.yml"),
    }[how]
    if cert is not None:
        runner.add(
            data,
            name="index.json",
            predicate_type=RELEASE_PREDICATE,
            predicate=predicate,
            cert=cert,
        )
    with pytest.raises(UntrustedRecordError) as err:
        latest_record(gh, _policy(runner))
    assert "index.json of the release v0.2.0: its attestation does not hold" in str(err.value)
    assert why in str(err.value)


def test_a_record_linking_outside_the_release_downloads_stops_the_release(
    tmp_path: Path,
) -> None:
    gh, runner = FakeGitHub(), AttestedRunner()
    elsewhere = "https://evil.example/wheels/"
    published_record(gh, runner, "v0.1.0", _site(tmp_path, "a", elsewhere))
    with pytest.raises(UntrustedRecordError) as err:
        latest_record(gh, _policy(runner))
    assert "links wheels outside this repository's release downloads" in str(err.value)
    assert elsewhere + "bt_scatter-0.1.0%2Bpt213cpu-cp312" in str(err.value)
    # the configured wheel_url is where wheels may live too (up to its first placeholder)
    assert latest_record(gh, _policy(runner, wheel_url=elsewhere + "{filename}")) is not None
    # but not a prefix that leaves the host open (`https://evil{…}` admits evil.attacker)
    with pytest.raises(UntrustedRecordError):
        latest_record(gh, _policy(runner, wheel_url="https://evil{project}.example/{filename}"))
    # another repository's downloads are outside too
    other = FakeGitHub()
    published_record(other, runner, "v0.1.0", _site(tmp_path, "b", RELEASES + "x/v0.1.0/"))
    with pytest.raises(UntrustedRecordError):
        latest_record(other, _policy(runner))


# -- the release statement --------------------------------------------------------------------


def _verified(**overrides: object) -> str:
    cert = certificate()
    predicate = release_predicate(
        tag="v1.0.0", commit="c" * 40, repository=REPO, run_id="1001", run_attempt="1"
    )
    for key, value in overrides.items():
        (cert if key in cert else predicate)[key] = value
    statement = {"predicateType": RELEASE_PREDICATE, "predicate": predicate}
    result = {"verificationResult": {"statement": statement, "signature": {"certificate": cert}}}
    return "Loaded digest …\n" + json.dumps([result]) + "\n"


EXPECT = Expect(tag="v1.0.0", commit="c" * 40, run_id="1001", source_digest="5" * 40)


def test_the_release_statement_binds_the_tag_commit_and_the_run() -> None:
    assert check_verification(_verified(), signer=SIGNER, expect=EXPECT) is None
    cases = {
        "commit": ("d" * 40, "commit: 'dddd"),
        "run_id": ("1002", "run id: '1002', expected '1001'"),
        "runInvocationURI": (
            f"https://github.com/{REPO}/actions/runs/999/attempts/1",
            "run: signed in https://github.com/example/bt-scatter/actions/runs/999",
        ),
        "sourceRepositoryRef": ("refs/tags/v1.0.0", "source ref: 'refs/tags/v1.0.0'"),
        "sourceRepositoryDigest": ("6" * 40, "run commit: '6666"),
        "runnerEnvironment": ("self-hosted", "runner: 'self-hosted'"),
        "repository": ("mallory/bt-scatter", "repository: 'mallory/bt-scatter'"),
    }
    for key, (value, why) in cases.items():
        problem = check_verification(_verified(**{key: value}), signer=SIGNER, expect=EXPECT)
        assert problem is not None and why in problem, (key, problem)
    assert check_verification("no JSON at all", signer=SIGNER, expect=EXPECT) == (
        "gh printed no verified attestation"
    )


def test_verify_files_runs_gh_per_file_and_reports_each(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.whl", tmp_path / "bad.whl"
    good.write_bytes(b"good")
    bad.write_bytes(b"bad")
    runner = AttestedRunner()
    predicate = release_predicate(
        tag="v1.0.0", commit="c" * 40, repository=REPO, run_id="1001", run_attempt="1"
    )
    runner.add(
        b"good",
        name="good.whl",
        predicate_type=RELEASE_PREDICATE,
        predicate=predicate,
        cert=certificate(),
    )
    failures = verify_files(
        [good, bad], signer=SIGNER, expect=EXPECT, ctx=RunContext(processes=runner, env=ENV)
    )
    assert list(failures) == [bad]
    assert failures[bad].startswith("gh attestation verify failed (exit 1)")
    assert [c.argv[:4] for c in runner.calls] == [
        ("gh", "attestation", "verify", str(good)),
        ("gh", "attestation", "verify", str(bad)),
    ]
    assert all(c.timeout == 300.0 for c in runner.calls)


def test_release_subjects_and_verify_provenance_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from buildtools.cli.ci.release_subjects import cmd_release_subjects
    from buildtools.cli.ci.verify_provenance import cmd_verify_provenance

    for key, value in {**ENV, "GITHUB_RUN_ID": "1001", "GITHUB_SHA": "5" * 40}.items():
        monkeypatch.setenv(key, value)
    wheel, record = tmp_path / "x-1-py3-none-any.whl", tmp_path / "index.json"
    wheel.write_bytes(b"wheel")
    record.write_bytes(b"{}")
    parser = build_parser(_extra_verbs())
    args = parser.parse_args(
        ["ci", "release-subjects", "--out", str(tmp_path / "attest"), "--tag", "v1.0.0",
         "--sha", "c" * 40, str(wheel), str(record)]
    )  # fmt: skip
    assert cmd_release_subjects(args, io.StringIO()) == 0
    assert (tmp_path / "attest" / "subjects.sha256").read_text() == subjects_text([wheel, record])
    predicate = json.loads((tmp_path / "attest" / "predicate.json").read_text())
    assert predicate == release_predicate(
        tag="v1.0.0", commit="c" * 40, repository=REPO, run_id="1001", run_attempt="1"
    )
    # what the attest action records for those subjects, then the check of each file
    runner = AttestedRunner()
    for path in (wheel, record):
        runner.add(
            path.read_bytes(),
            name=path.name,
            predicate_type=RELEASE_PREDICATE,
            predicate=predicate,
            cert=certificate(),
        )
    verify = parser.parse_args(
        ["ci", "verify-provenance", "--tag", "v1.0.0", "--sha", "c" * 40, str(wheel), str(record)]
    )
    out = io.StringIO()
    assert cmd_verify_provenance(verify, out, runner=runner) == 0
    assert "provenance verified for 2 file(s)" in out.getvalue()
    # the same files, claimed for another commit of the tag: refused, named
    other = parser.parse_args(
        ["ci", "verify-provenance", "--tag", "v1.0.0", "--sha", "d" * 40, str(wheel)]
    )
    with pytest.raises(PublishError, match=r"x-1-py3-none-any\.whl: commit: 'cccc"):
        cmd_verify_provenance(other, io.StringIO(), runner=runner)


def test_subjects_refuse_two_files_of_one_name(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "x.whl").write_bytes(d.encode())
    with pytest.raises(PublishError, match="same name"):
        subjects_text([tmp_path / "a" / "x.whl", tmp_path / "b" / "x.whl"])
