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

Whatever a case ends in, what it prints is printable (no ESC, C1 or bidi control, no line a
GitHub Actions log would run as a workflow command: `untrusted.printable`) and holds no
credential a case planted (`S3CR3T`, redacted by `untrusted.redact`). The wheels' `smoke`
cases are installed beside torch 2.13.0 (CPU) and smoke-tested, on GitHub Actions terms
(annotations, step summary).
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
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.crafted import make_site_packages, make_wheel
from fixtures.hostile_server import BEHAVIOURS, serve

from buildtools.cli.main import main
from buildtools.untrusted import unprintable

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


SECRET = "S3CR3T"  # the credential cases plant: never printed


def _assert_shown_safely(text: str, case: str, *, annotations: bool = False) -> None:
    """Nothing in `text` acts on a terminal or a CI log, and no planted secret shows."""
    assert SECRET not in text, f"{case}: a credential was printed\n{text}"
    for raw in text.splitlines():
        # our own annotation: the command is ours, its message is data
        line = raw.split("::", 2)[2] if annotations and raw.startswith("::error ") else raw
        assert not line.lstrip().startswith("::"), f"{case}: a workflow command: {line!r}"
        assert "##[" not in line, f"{case}: a workflow command: {line!r}"
        assert unprintable(line) is None, f"{case}: {unprintable(line)} in {line!r}"


def _assert_clear(
    code: int, err: str, want: int, fragment: str, case: str, *, output: str = ""
) -> None:
    """`err` (stderr) is clear: no traceback, printable, an error line; the exit code is
    `want`; `fragment` is in `err` or in `output` (a report on stdout, whose quoted child
    output may hold a traceback of the wheel's own)."""
    assert "Traceback" not in err, f"{case}: traceback\n{err}"
    _assert_shown_safely(err, case)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, f"{case}: no error message"
    assert code == want, f"{case}: exit {code}, expected {want}\n{err}"
    text = "\n".join([*lines, *output.splitlines()])
    assert fragment in text, f"{case}: {fragment!r} not in\n{err}\n{output}"
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
        **_state_places(tmp_path),
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


def _state_places(tmp: Path) -> dict[str, str]:
    """`dist` state directories that must not be trusted, and a site whose index.json is a
    link out of it (issue 44): {sharedstate} writable by others, {linklock} whose lock is a
    link to {tmp}/escaped-lock, {credstate} / {tokenstate} recording a URL with a password /
    a token with CR/LF, {linksite} a site whose index.json links to a file outside."""
    shared = tmp / "sharedstate"
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp / "linklock"
    link.mkdir(mode=0o700)
    (link / ".lock").symlink_to(tmp / "escaped-lock")
    record = {"schema": "torch-buildtools/dist-cluster/v2", "processes": []}
    for name, url, token in (
        ("credstate", "http://user:S3CR3T@127.0.0.1:10600", "t0k3n"),
        ("tokenstate", "http://127.0.0.1:10600", "t0k3n\r\nX-S3CR3T: 1"),
    ):
        state = tmp / name
        state.mkdir(mode=0o700)
        cluster = state / "cluster.json"
        cluster.write_text(json.dumps({**record, "scheduler_url": url, "client_token": token}))
        cluster.chmod(0o600)
    site = tmp / "linksite"
    site.mkdir()
    (tmp / "outside.json").write_text('{"S3CR3T": "a file outside the site"}')
    (site / "index.json").symlink_to(tmp / "outside.json")
    return {
        name: str(tmp / name)
        for name in ("sharedstate", "linklock", "credstate", "tokenstate", "linksite")
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
    assert not list(Path(places["tmp"]).glob("escaped*")), "a link was followed"


WHEELS = _table(CORPUS / "wheels" / "expect.tsv")


def _smoke(
    wheels: list[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    """`buildtools smoke` of `wheels` beside torch 2.13.0 (CPU), as a GitHub Actions job:
    (exit code, stderr, stdout); stdout, the step summary and JUnit checked as written."""
    from fixtures.envs import cache_dir

    torch = request.getfixturevalue("torch213")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # rich's own colour (FORCE_COLOR=1, as CI sets) is ours; what is looked for is the input's
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("BUILDTOOLS_CACHE_DIR", str(cache_dir()))
    out = io.StringIO()
    results = tmp_path / "results"
    argv = ["smoke", *wheels, "--accelerator", "cpu", "--torch-python", str(torch.python)]
    got, err = _run([*argv, "--out", str(results)], report=out)
    _assert_shown_safely(out.getvalue(), "smoke stdout", annotations=True)
    _assert_shown_safely(summary.read_text(encoding="utf-8"), "step summary")
    ET.parse(results / "junit.xml")  # XML 1.0, whatever the output held
    return got, err, out.getvalue()


@pytest.mark.parametrize(("case", "verb", "code", "fragment"), WHEELS, ids=[r[0] for r in WHEELS])
def test_wheel_case(
    case: str,
    verb: str,
    code: str,
    fragment: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wheels = [str(w) for w in sorted((CORPUS / "wheels" / case).glob("*.whl"))]
    assert wheels, case
    output = ""
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
    elif verb == "smoke":
        got, err, output = _smoke(wheels, tmp_path, request, monkeypatch)
    else:
        raise AssertionError(f"unknown verb {verb}")
    _assert_clear(got, err, int(code), fragment, case, output=output)
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
