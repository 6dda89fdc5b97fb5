"""Untrusted text on its way out (issue 44, classes 2, 3 and 4): the one sanitiser
(`untrusted.printable`) and its uses (the smoke's table, JUnit, annotations and step summary,
`check`, `doctor`, every error line), the one redaction (`untrusted.redact`), and numbers
too long for `int()` refused by the JSON decoder with one line."""

from __future__ import annotations

import io
import re
import shlex
import struct
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from fixtures.fakehttp import FakeHttp
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.tags import Tag
from packaging.version import Version

from buildtools.errors import NetworkError
from buildtools.jsonfields import JSON_MAX_DIGITS, decode_json
from buildtools.smoke.smoke_report import (
    RunnerInfo,
    SmokeReport,
    SmokeResult,
    SmokeStatus,
    github_annotations,
    junit_xml,
    step_summary,
)
from buildtools.torchindex.remote import read_metadata
from buildtools.torchindex.simple import IndexFile
from buildtools.untrusted import markdown, markdown_code, printable, redact, shown, unprintable

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202egnp.exe\u2066\x00\r\n::warning::injected\n##[error]x"


def _dangerous(text: str, *, newlines: bool) -> list[str]:
    """What a terminal, a log reader or an XML parser would act on in `text`."""
    found = [
        ch
        for ch in text
        if (ch not in "\n\t" or not newlines)
        and (unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") or ch in "\ufffe\uffff")
    ]
    for line in text.split("\n"):
        if line.lstrip().startswith("::"):
            found.append(line)
    if "##[" in text:
        found.append("##[")
    return found


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=200))
def test_printable_leaves_nothing_a_terminal_log_or_xml_parser_acts_on(text: str) -> None:
    for newlines in (True, False):
        shown_text = printable(text, newlines=newlines)
        assert not _dangerous(shown_text, newlines=newlines), repr(shown_text)
        if not newlines:
            assert "\n" not in shown_text
        assert unprintable(shown_text, newlines=newlines) is None
    element = ET.Element("a", {"b": printable(text)})
    element.text = printable(text)
    ET.fromstring(ET.tostring(element, encoding="unicode"))  # XML 1.0 can hold it


@given(
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Zl", "Zp", "Cs")),
        max_size=80,
    )
)
def test_plain_text_is_shown_as_it_is(text: str) -> None:
    if "::" not in text and "##[" not in text:
        assert printable(text) == text
        assert unprintable(text) is None


def test_each_kind_of_control_becomes_a_visible_escape() -> None:
    got = printable(HOSTILE)
    assert got == (
        "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202egnp.exe\\u2066\\x00\\x0d\n"
        "\\x3a:warning::injected\n#\\x23[error]x"
    )
    assert unprintable("H100\x9b") == "\\x9b" and unprintable("H100\u202e") == "\\u202e"
    assert unprintable("a\nb") == "\\x0a" and unprintable("a\nb", newlines=True) is None
    # a workflow command after whitespace (the runner trims it) is defused too
    assert printable("  \t::add-mask::x") == "  \t\\x3a:add-mask::x"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("http://user:PASS@host:8080/p", "http://user:***@host:8080/p"),
        ("https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/x", "https://***@github.com/x"),
        ("http://u:p@ss@w0rd@host/", "http://u:***@host/"),  # the last '@' ends the user part
        ("--index-url https://x.io/simple?token=s3cr3t&x=1", "--index-url https://x.io/simple?token=***&x=1"),
        ("https://s3.io/a.whl?X-Amz-Signature=abc&X-Amz-Credential=k", "https://s3.io/a.whl?X-Amz-Signature=***&X-Amz-Credential=***"),
        ("token ghp_abcdefghijklmnopqrstuvwxyz0123 leaked", "token *** leaked"),
        ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer ***"),
        ("pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAw", "***"),
        ("http://127.0.0.1:10600", "http://127.0.0.1:10600"),  # nothing to redact
        ("user@example.com wrote http://host/a", "user@example.com wrote http://host/a"),
    ],
)  # fmt: skip
def test_redact_hides_every_credential_a_url_or_token_carries(text: str, want: str) -> None:
    assert redact(text) == want


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "file", "git+https"]),
    user=st.text(alphabet="abcXYZ019-_.~", min_size=1, max_size=12),
    password=st.text(alphabet=st.characters(codec="ascii", exclude_characters="/?# \t\n\r\x0b\x0c"), min_size=6, max_size=30),
    around=st.text(alphabet="ab :;,()", max_size=10),
)  # fmt: skip
def test_no_password_survives_redaction(scheme: str, user: str, password: str, around: str) -> None:
    url = f"{scheme}://{user}:{password}@host.example/path"
    got = redact(f"{around}{url}{around}")
    assert f":{password}@host" not in got and f"{user}:***@host.example" in got
    assert "host.example/path" in got


def test_redaction_and_sanitising_are_linear() -> None:
    import time

    worst = "a." * 200_000 + "://" * 50_000 + "?token" * 20_000
    started = time.monotonic()
    shown(worst)
    assert time.monotonic() - started < 5


def _report(wheel: str, text: str) -> SmokeReport:
    runner = RunnerInfo(
        accelerator="cuda", gpu=f"H100{text}", driver="580", torch="2.13.0+cpu",
        torch_cuda=None, python="3.12", date="2026-11-25", host=f"gpu{text}",
    )  # fmt: skip
    result = SmokeResult(
        wheel=wheel, sha256="a" * 64, cell=f"torch2.13.0-cpu-cp312{text}",
        status=SmokeStatus.IMPORT_ERROR, diagnosis=f"import of pkg: ImportError: x{text}",
        output=f"Traceback\n{text}\nImportError: x",
    )  # fmt: skip
    return SmokeReport(runner=runner, results=(result,))


def test_the_smoke_reports_carry_no_control_markup_or_workflow_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rich's own colour (FORCE_COLOR=1, as CI sets) is ours; what is looked for is the input's
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    wheel = "pkg-1.0-py3-none-any.whl`</summary><script>alert(1)</script>|x"
    report = _report(wheel, HOSTILE)
    table = io.StringIO()
    report.print_table(table)
    assert not _dangerous(table.getvalue(), newlines=True), table.getvalue()
    for line in github_annotations(report):
        assert line.startswith("::error ") and "\n" not in line and "\x1b" not in line
        assert "::warning::" not in line.split("::", 2)[2].replace("\\x3a:warning", "")
    root = ET.fromstring(junit_xml(report).split("\n", 1)[1])  # valid XML: it parses
    assert root.find("testsuite") is not None
    md = step_summary(report)
    assert markdown_code(wheel) in md  # the name inside a code span no backtick closes
    outside_code = md.replace(markdown_code(wheel), "")
    assert "<script>" not in outside_code and "\x1b" not in md and "\u202e" not in md
    assert "<details><summary>pkg-1.0-py3-none-any.whl`&lt;/summary&gt;&lt;script&gt;" in md
    assert re.search(r"^::", md, re.M) is None


def test_markdown_is_inert() -> None:
    assert markdown("[x](javascript:1) <b> *y* | z\n::w") == (
        "\\[x\\]\\(javascript:1\\) &lt;b&gt; \\*y\\* \\| z\\\\x0a::w"
    )
    assert markdown_code("a``b") == "```a``b```"
    assert markdown_code("`a") == "`` `a ``"


def test_a_record_field_with_esc_makes_junit_that_parses() -> None:
    report = _report("pkg-1.0-py3-none-any.whl", "\x1b[31m\x00\udcff\ufffe")
    ET.fromstring(junit_xml(report).split("\n", 1)[1])


@pytest.mark.parametrize(
    "raw",
    [
        '{"torch_versions": ["2.' + "9" * 5000 + '"]}',  # a version: packaging's int()
        "[" + "1" * 5000 + "]",  # a number: json's int()
        '{"a": "\\u0039' + "9" * JSON_MAX_DIGITS + '"}',  # escaped digits
        '{"a": "' + "\uff19" * (JSON_MAX_DIGITS + 1) + '"}',  # full-width digits: int() reads them
    ],
)
def test_a_number_longer_than_any_field_holds_is_one_line(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^doc: a number of more than 100 digits") as info:
        decode_json(raw, what="doc")
    assert "\n" not in str(info.value) and "set_int_max_str_digits" not in str(info.value)
    decode_json('{"a": "' + "9" * JSON_MAX_DIGITS + '"}', what="doc")  # at the limit: fine


# --------------------------------------------------------------------------- class 4: a wheel
# read by HTTP ranges from the index (torchindex.remote): its end records may lie


def _tail_wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(
            "demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
        )
        zf.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buf.getvalue()


def _zip64_locator_at(data: bytes, record_at: int, *, signature: bool) -> bytes:
    """`data` with its end record marked ZIP64 and a locator pointing at `record_at` (and,
    with `signature`, a ZIP64 end-record signature planted there)."""
    body, eocd = bytearray(data[:-22]), bytearray(data[-22:])
    eocd[12:20] = b"\xff" * 8  # size and offset: "see the ZIP64 record"
    out = bytearray(body + b"PK\x06\x07" + struct.pack("<IQI", 0, record_at, 1) + eocd)
    if signature and 0 <= record_at <= len(out) - 4:
        out[record_at : record_at + 4] = b"PK\x06\x06"
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(back=st.integers(min_value=-8, max_value=120), signature=st.booleans())
def test_a_zip64_locator_pointing_anywhere_is_one_network_error(back: int, signature: bool) -> None:
    data = _tail_wheel()
    size = len(data) + 20
    crafted = _zip64_locator_at(data, size - back, signature=signature)
    http = FakeHttp()
    url = "https://files.example/demo-1.0-py3-none-any.whl"
    http.add_file(url, crafted)
    file = IndexFile(
        filename="demo-1.0-py3-none-any.whl", url=url, sha256="0" * 64, size=len(crafted),
        version=Version("1.0"), build=(), tags=frozenset({Tag("py3", "none", "any")}),
        core_metadata=False, core_metadata_sha256=None,
    )  # fmt: skip
    with pytest.raises(NetworkError) as info:
        read_metadata(file, http)
    assert "\n" not in str(info.value)


def test_a_zip64_locator_at_the_files_last_bytes_names_it() -> None:
    data = _tail_wheel()
    crafted = _zip64_locator_at(data, len(data) + 20 - 4, signature=True)  # the last 4+ bytes
    http = FakeHttp()
    url = "https://files.example/demo-1.0-py3-none-any.whl"
    http.add_file(url, crafted)
    file = IndexFile(
        filename="demo-1.0-py3-none-any.whl", url=url, sha256="0" * 64, size=len(crafted),
        version=Version("1.0"), build=(), tags=frozenset({Tag("py3", "none", "any")}),
        core_metadata=False, core_metadata_sha256=None,
    )  # fmt: skip
    with pytest.raises(NetworkError, match="ZIP64 end record"):
        read_metadata(file, http)


# --------------------------------------------------------------------------- class 8: commands
# printed for a person to paste are argv lists joined by shlex


@settings(max_examples=200, deadline=None)
@given(
    torch=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30),
    python=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12),
)  # fmt: skip
def test_the_venv_recipe_check_prints_quotes_every_value_from_the_record(
    torch: str, python: str
) -> None:
    from buildtools.cli.check import _recipe
    from buildtools.model import Accelerator, BuildRecord

    record = BuildRecord(
        torch=torch, accelerator=Accelerator.parse("cpu"), cxx11_abi=True, python=python
    )
    wheel = Path("/w/pkg-1.0-py3-none-any.whl")
    words = shlex.split(_recipe(wheel, record))
    commands: list[list[str]] = [[]]
    for word in words:  # `&&` is the only operator the line may hold: every value is quoted
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    assert len(commands) == 3
    py = ".".join(python.split(".")[:2])
    venv = f"/tmp/torch-{torch.replace('+', '-')}"
    assert commands[0] == [f"python{py}", "-m", "venv", venv]
    assert commands[1][1:3] == ["install", f"torch=={torch.split('+', 1)[0]}"]
    assert commands[2] == [
        "buildtools",
        "check",
        str(wheel),
        "--torch",
        f"{venv}/lib/python{py}/site-packages",
    ]


# --------------------------------------------------------------------------- class 10: the
# fields of a smoke run a site keeps (index.json, the coverage map)

_RUN = {
    "sha256": "b" * 64,
    "cell": "torch2.13.0-cpu-cp312",
    "runner": "cuda",
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.159.04",
    "date": "2026-11-25",
    "python": "3.12.3",
    "torch": "2.13.0+cpu",
}


@pytest.mark.parametrize(
    "bad", ["H100\x9b2J", "H100\u202egnp", "H100\x85", "H100\u2066x", "H\u200bX"]
)
@pytest.mark.parametrize("key", ["gpu", "driver", "cell", "python", "torch"])
def test_a_smoke_runs_text_with_c1_or_bidi_is_refused(key: str, bad: str) -> None:
    from buildtools.index.smokelog import SmokeRun

    with pytest.raises(ValueError, match=f"{key}: expected a string of at most 200 printable"):
        SmokeRun.from_json({**_RUN, key: bad}, "smoke[0]")


@pytest.mark.parametrize(
    "date",
    ["２０２６-11-25", "2026-99-25", "2026-02-30", "٢٠٢٦-١١-٢٥", "2026-11-25T\u0661", "26-11-25"],
)
def test_a_smoke_runs_date_is_ascii_and_a_real_day(date: str) -> None:
    from buildtools.index.smokelog import SmokeRun

    with pytest.raises(ValueError, match="date: expected an ISO date"):
        SmokeRun.from_json({**_RUN, "date": date}, "smoke[0]")
    assert SmokeRun.from_json({**_RUN, "date": "2026-02-28T10:00:00Z"}).date == "2026-02-28"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_a_smoke_run_keeps_only_text_it_could_show_as_is(gpu: str) -> None:
    from buildtools.index.smokelog import SmokeRun

    try:
        run = SmokeRun.from_json({**_RUN, "gpu": gpu})
    except ValueError:
        assert unprintable(gpu) is not None or len(gpu) > 200
        return
    assert run.gpu is None or printable(run.gpu, newlines=False) == run.gpu or "::" in run.gpu


def test_argparse_quotes_the_command_line_through_the_sanitiser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from buildtools.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["plan", "--bogus", "\x1b[2J\u202e\n::warning::x"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "unrecognized arguments: --bogus \\x1b[2J\\u202e\\x0a::warning::x" in err
    assert unprintable(err, newlines=True) is None
