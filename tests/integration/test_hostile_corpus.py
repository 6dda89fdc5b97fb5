"""The corpus of bad inputs (tests/corpus/): every case ends in clear error lines (no
traceback) and its documented exit code (docs/security.md), and writes nothing outside its
place. One file per case; each directory's expect.tsv says what the case must end in.

- matrix/: matrix.yaml files, fed to `buildtools plan --matrix` (and so to every verb that
  loads a matrix);
- args.tsv: command lines of every verb;
- wheels/: crafted wheels, fed to `buildtools index`;
- manifests/: a published site's index.json, merged into by `buildtools index` and
  restored over HTTP (a server on loopback) by `buildtools ci restore-site`;
- servers.tsv: web servers that misbehave (fixtures/hostile_server.py), restored from by
  `buildtools ci restore-site`.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.crafted import make_site_packages, make_wheel
from fixtures.hostile_server import BEHAVIOURS, serve

from buildtools.cli.main import main

pytestmark = pytest.mark.integration

CORPUS = REPO / "tests" / "corpus"


def _table(path: Path) -> list[list[str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.split("\t"))
    return rows


def _run(argv: list[str], *, report: io.StringIO | None = None) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv, out=report if report is not None else io.StringIO())
        except SystemExit as exc:  # argparse: usage errors exit 2
            code = int(exc.code or 0)
    return code, err.getvalue()


def _assert_clear(code: int, err: str, want: int, fragment: str, case: str) -> None:
    assert "Traceback" not in err, f"{case}: traceback\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, f"{case}: no error message"
    assert code == want, f"{case}: exit {code}, expected {want}\n{err}"
    text = "\n".join(lines)
    assert fragment in text, f"{case}: {fragment!r} not in\n{err}"
    assert any(line.startswith(("error: ", "buildtools")) for line in lines), err


MATRIX = _table(CORPUS / "matrix" / "expect.tsv")


def test_matrix_corpus_has_every_file() -> None:
    files = {p.name for p in (CORPUS / "matrix").glob("*.yaml")}
    assert files == {row[0] for row in MATRIX}


@pytest.mark.parametrize(("name", "code", "fragment"), MATRIX, ids=[r[0] for r in MATRIX])
def test_matrix_case(name: str, code: str, fragment: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CORPUS / "matrix")
    got, err = _run(["plan", "--matrix", name])
    _assert_clear(got, err, int(code), fragment, name)


ARGS = _table(CORPUS / "args.tsv")


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "afile").write_text("not a wheel, not a directory\n")
    special = tmp_path / "special"
    special.mkdir()
    os.mkfifo(special / "fifo")
    os.mkfifo(tmp_path / "fifo-1.0-py3-none-any.whl")  # also what `index {tmp}` finds there
    (special / "zero-1.0-py3-none-any.whl").symlink_to("/dev/zero")
    for name, make in (("fifoproject", os.mkfifo), ("zeroproject", _link_to_zero)):
        (special / name).mkdir()
        make(special / name / "setup.py")
    return {
        "repo": str(REPO),
        "corpus": str(CORPUS),
        "tmp": str(tmp_path),
        "file": str(tmp_path / "afile"),
        "wheel": str(_good_wheel(tmp_path / "good")),
        "fifo": str(special / "fifo"),
        "fifowhl": str(tmp_path / "fifo-1.0-py3-none-any.whl"),
        "zerowhl": str(special / "zero-1.0-py3-none-any.whl"),
        "fifoproject": str(special / "fifoproject"),
        "zeroproject": str(special / "zeroproject"),
    }


def _link_to_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize(("argv", "code", "fragment"), ARGS, ids=[r[0] for r in ARGS])
def test_argument_case(
    argv: str,
    code: str,
    fragment: str,
    places: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(places["tmp"])
    words = [w.replace("{filename}", "\0") for w in shlex.split(argv)]
    words = [w.format(**places).replace("\0", "{filename}") for w in words]
    got, err = _run(words)
    _assert_clear(got, err, int(code), fragment, argv)
    assert not (Path("/tmp") / "escaped.so").exists()


WHEELS = _table(CORPUS / "wheels" / "expect.tsv")


@pytest.mark.parametrize(("case", "verb", "code", "fragment"), WHEELS, ids=[r[0] for r in WHEELS])
def test_wheel_case(case: str, verb: str, code: str, fragment: str, tmp_path: Path) -> None:
    wheels = [str(w) for w in sorted((CORPUS / "wheels" / case).glob("*.whl"))]
    assert wheels, case
    if verb == "index":
        site = tmp_path / "site"
        got, err = _run(["index", *wheels, "--no-matrix", "--site", str(site)])
        assert not site.exists() or not any(site.rglob("*.whl")), "a bad wheel was published"
    elif verb == "check":  # findings and unreadable wheels are reported on stdout
        site = make_site_packages(tmp_path / "torch-site")
        report = io.StringIO()
        got, err = _run(["check", *wheels, "--torch", str(site)], report=report)
        assert not err, err
        err = report.getvalue().replace("FAIL  ", "error: FAIL ", 1)
    else:
        raise AssertionError(f"unknown verb {verb}")
    _assert_clear(got, err, int(code), fragment, case)
    assert not list(tmp_path.parent.glob("escaped*"))


MANIFESTS = _table(CORPUS / "manifests" / "expect.tsv")


def _good_wheel(directory: Path) -> Path:
    record = {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    return make_wheel(
        directory,
        name="bt_scatter",
        version="0.2.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b""},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )


@pytest.mark.parametrize(("name", "code", "fragment"), MANIFESTS, ids=[r[0] for r in MANIFESTS])
def test_manifest_merge_case(name: str, code: str, fragment: str, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(CORPUS / "manifests" / name, site / "index.json")
    before = (site / "index.json").read_bytes()
    got, err = _run(["index", str(_good_wheel(tmp_path / "w")), "--no-matrix", "--site", str(site)])
    _assert_clear(got, err, int(code), fragment, name)
    assert (site / "index.json").read_bytes() == before  # the site is left as it was
    assert sorted(p.name for p in site.iterdir()) == ["index.json"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served on loopback: (its path, its URL)."""
    root = tmp_path / "served"
    (root / "whl" / "wheels").mkdir(parents=True)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root / "whl", f"http://127.0.0.1:{server.server_address[1]}/whl"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("name", "code", "fragment"), MANIFESTS, ids=[r[0] for r in MANIFESTS])
def test_manifest_restore_case(
    name: str, code: str, fragment: str, tmp_path: Path, served: tuple[Path, str]
) -> None:
    root, url = served
    shutil.copy(CORPUS / "manifests" / name, root / "index.json")
    out = tmp_path / "restored"
    got, err = _run(
        ["ci", "restore-site", "--base-url", url, "--site", str(out), "--github-output", "-"]
    )
    _assert_clear(got, err, int(code), fragment, name)
    assert not list(tmp_path.rglob("escaped*"))
    assert not (tmp_path / "etc").exists()


SERVERS = _table(CORPUS / "servers.tsv")


def test_server_corpus_names_every_behaviour() -> None:
    assert {row[0] for row in SERVERS} == set(BEHAVIOURS)


@pytest.mark.parametrize(("name", "code", "fragment"), SERVERS, ids=[r[0] for r in SERVERS])
def test_server_case(
    name: str, code: str, fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUILDTOOLS_HTTP_TIMEOUT", "3")
    out = tmp_path / "restored"
    with serve(name) as url:
        started = time.monotonic()
        got, err = _run(
            ["ci", "restore-site", "--base-url", url, "--site", str(out), "--github-output", "-"]
        )
        took = time.monotonic() - started
    _assert_clear(got, err, int(code), fragment, name)
    assert len(err.strip().splitlines()) == 1, err
    assert took < 30, f"{name}: {took:.0f} s"  # a deadline, not a hang (3 tries at most)
    assert not any(p.is_file() and p.name.endswith(".whl") for p in out.rglob("*"))


def test_corpus_is_large_enough() -> None:
    total = len(MATRIX) + len(ARGS) + len(WHEELS) + len(MANIFESTS) + len(SERVERS)
    assert total >= 100, total
