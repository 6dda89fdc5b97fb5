"""The release bundle (`buildtools ci bundle`): what the unprivileged prepare job hands the
signing job, bound by the sha256 of its manifest. The signing job's bash check of it runs
end to end in tests/integration/test_ci_runs.py (a changed byte, an added file, a
rewritten manifest)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel

from buildtools.cisteps.release_bundle import BUNDLE_MANIFEST, manifest_text, write_bundle
from buildtools.cli.main import _extra_verbs, build_parser
from buildtools.errors import PublishError
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

BASE = "https://example.github.io/bt-scatter/whl"
PREFIX = "https://github.com/example/bt-scatter/releases/download/v0.1.0/"


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(selected wheels, pages root, attest dir): one wheel, indexed with a release link."""
    selected = tmp_path / "selected"
    selected.mkdir()
    wheel = make_wheel(
        selected,
        name="bt_scatter",
        version="0.1.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b"x"},
        requires=["torch==2.13.*"],
        dist_info_files={
            "buildtools.json": json.dumps(
                {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
            ).encode()
        },
    )
    root = tmp_path / "_site"
    source = read_wheel(wheel, wheel_url_template=PREFIX + "{filename}")
    publish(root / "whl", [source], IndexSettings(base_url=BASE), load_knowledge())
    attest = tmp_path / "attest"
    attest.mkdir()
    (attest / "subjects.sha256").write_text("x  y\n")
    (attest / "predicate.json").write_text("{}\n")
    return selected, root, attest


def test_the_bundle_holds_the_release_and_its_digest_binds_every_file(tmp_path: Path) -> None:
    selected, root, attest = _inputs(tmp_path)
    bundle = write_bundle(
        tmp_path / "release-bundle",
        wheels=sorted(selected.glob("*.whl")),
        site=root,
        record=root / "whl" / "index.json",
        attest=attest,
        url_prefix=PREFIX,
        base_record="42",
    )
    out = bundle.root
    (wheel,) = bundle.wheels
    assert (out / "wheels" / wheel).read_bytes() == (selected / wheel).read_bytes()
    assert (out / "record").read_text() == "site/whl/index.json\n"
    assert (out / "base-record").read_text() == "42\n"
    size = (selected / wheel).stat().st_size
    sha = hashlib.sha256((selected / wheel).read_bytes()).hexdigest()
    # the wheel the index links under this tag's downloads, with the bytes it records
    assert (out / "linked.tsv").read_text() == f"{sha} {size} {wheel}\n"
    manifest = (out / BUNDLE_MANIFEST).read_text()
    assert bundle.digest == hashlib.sha256(manifest.encode()).hexdigest()
    listed = [line.split("  ", 1)[1] for line in manifest.splitlines()]
    assert listed == sorted(listed)
    assert {"attest/predicate.json", "site/whl/index.json", f"wheels/{wheel}"} <= set(listed)
    assert BUNDLE_MANIFEST not in listed
    # any change to a file changes the manifest, and so the digest the signing job checks
    (out / "site" / "whl" / "index.json").write_text("{}")
    assert hashlib.sha256(manifest_text(out).encode()).hexdigest() != bundle.digest


def test_the_bundle_refuses_what_the_signing_job_could_not_read_safely(tmp_path: Path) -> None:
    selected, root, attest = _inputs(tmp_path)
    kw = {"site": root, "attest": attest, "url_prefix": PREFIX}
    record = root / "whl" / "index.json"
    wheels = sorted(selected.glob("*.whl"))
    with pytest.raises(PublishError, match="an asset id or `none`"):
        write_bundle(tmp_path / "b", wheels=wheels, record=record, base_record="1; rm", **kw)
    with pytest.raises(PublishError, match="not inside the site"):
        write_bundle(
            tmp_path / "b", wheels=wheels, record=tmp_path / "index.json", base_record="none", **kw
        )
    (root / "whl" / "a name with spaces").write_text("x")
    with pytest.raises(PublishError, match="not a path the release bundle may hold"):
        write_bundle(tmp_path / "b", wheels=wheels, record=record, base_record="none", **kw)
    (root / "whl" / "a name with spaces").unlink()
    (root / "whl" / "link").symlink_to("/etc/passwd")
    with pytest.raises(PublishError, match="not a regular file"):
        write_bundle(tmp_path / "b", wheels=wheels, record=record, base_record="none", **kw)


def test_the_bundle_verb_outputs_the_digest(tmp_path: Path) -> None:
    selected, root, attest = _inputs(tmp_path)
    output = tmp_path / "github_output"
    args = build_parser(_extra_verbs()).parse_args(
        ["ci", "bundle", "--out", str(tmp_path / "release-bundle"), "--wheels", str(selected),
         "--site-root", str(root), "--record", str(root / "whl" / "index.json"),
         "--attest", str(attest), "--url-prefix", PREFIX, "--base-record", "none",
         "--github-output", str(output)]
    )  # fmt: skip
    out = io.StringIO()
    assert args.handler(args, out) == 0
    digest = hashlib.sha256((tmp_path / "release-bundle" / BUNDLE_MANIFEST).read_bytes())
    assert output.read_text() == f"bundle={digest.hexdigest()}\n"
    assert "1 wheel(s)" in out.getvalue() and "1 linked release asset(s)" in out.getvalue()
    assert json.loads((tmp_path / "release-bundle" / "site" / "whl" / "index.json").read_text())
