"""Untrusted text on its way out: the one sanitiser, and the one redaction of credentials.

buildtools shows text it did not write: a loader's message, a smoke command's output, a
wheel's file name, the fields of a build record or a site's manifest, a URL from the
command line. Shown raw, such text is an instruction to whatever reads it:

- a terminal runs ESC/CSI sequences (clear the screen, retitle the window, hide what
  follows) and C1 controls (U+009B is CSI on its own);
- bidi overrides and isolates (U+202A…U+202E, U+2066…U+2069) reorder what a reviewer sees;
- a GitHub Actions job log runs a line that starts with `::` (`::warning::`,
  `::add-mask::`, `::stop-commands::`) or holds `##[` as a workflow command;
- XML 1.0 (junit.xml) cannot hold most C0 controls nor lone surrogates at all.

`printable` is the one function every such string passes through before it reaches a
terminal, a log, a step summary, XML or HTML (those formats' own escaping, `html.escape`
and ElementTree's, is applied after it, by their writers). Each character it neutralises
becomes a visible escape (`\\x1b`, `\\u202e`), so the text stays readable and nothing is
silently dropped. `unprintable` is the same rule for validators that refuse instead.

`markdown` and `markdown_code` are `printable` for a step summary or any Markdown: one line,
no link, image, HTML, emphasis or table-cell break; or a code span no backtick closes.

`redact` is the one function every URL or token passes through before it is printed: the
password (or token) of a URL's user part, the values of query parameters that carry
secrets, and tokens of known shapes become `***`.
"""

from __future__ import annotations

__all__ = [
    "REDACTED",
    "markdown",
    "markdown_code",
    "printable",
    "redact",
    "shown",
    "unprintable",
]

import re
import unicodedata

REDACTED = "***"

# Character categories a terminal, a log reader or an XML parser may act on: controls (C0,
# DEL, C1), format characters (bidi marks, overrides and isolates, zero-width characters),
# line and paragraph separators, lone surrogates (undecodable bytes kept as U+DCxx).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NONCHARACTERS = frozenset({"\ufffe", "\uffff"})  # not XML either
# `::command::` at a line's start (after whitespace, which the runner trims) and the older
# `##[command]` form are workflow commands in a GitHub Actions log.
_COMMAND_START = "::"
_COMMAND_V1 = "##["


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _neutral(ch: str, keep: str) -> bool:
    if ch in keep:
        return True
    if ch.isprintable() and ch not in _NONCHARACTERS:
        return True  # the common case, decided without the database
    return unicodedata.category(ch) not in _ESCAPED_CATEGORIES and ch not in _NONCHARACTERS


def unprintable(text: str, *, newlines: bool = False) -> str | None:
    """The first character `printable` would escape (as its escape, `\\u202e`), or None.

    For validators of fields that must be plain text (a GPU name, a date): they refuse what
    the sanitiser would have to neutralise. A newline or a tab counts as unprintable
    unless `newlines` (text of several lines)."""
    keep = "\n\t" if newlines else ""
    for ch in text:
        if not _neutral(ch, keep):
            return _escape(ch)
    return None


def printable(text: str, *, newlines: bool = True) -> str:
    """`text` safe to show in a terminal, a CI log, a step summary, XML or HTML.

    Controls, bidi and other format characters, separators, lone surrogates and the
    non-characters U+FFFE/U+FFFF become visible escapes; a line that would be a GitHub
    Actions workflow command is defused (its first ':' or '#' escaped). Newlines and tabs
    are kept when `newlines` (a message of several lines), else escaped too (one line)."""
    keep = "\n\t" if newlines else ""
    if all(ch.isprintable() or ch in keep for ch in text) and not _has_command(text):
        return text  # nothing to do: most text, and the fast path
    out = "".join(ch if _neutral(ch, keep) else _escape(ch) for ch in text)
    if _has_command(out):
        out = "\n".join(_defuse(line) for line in out.split("\n"))
    return out


def _has_command(text: str) -> bool:
    return _COMMAND_V1 in text or any(
        line.lstrip().startswith(_COMMAND_START) for line in text.split("\n")
    )


def _defuse(line: str) -> str:
    line = line.replace(_COMMAND_V1, "#\\x23[")
    stripped = line.lstrip()
    if stripped.startswith(_COMMAND_START):
        indent = line[: len(line) - len(stripped)]
        line = f"{indent}\\x3a{stripped[1:]}"
    return line


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_AUTHORITY_ENDS = frozenset("/?#") | frozenset(" \t\n\r\f\v")
# a query parameter whose name says it is a secret; names bounded, so no backtracking blowup
_SECRET_PARAMS = re.compile(
    r"(?P<key>[?&;](?:[A-Za-z0-9_.-]{0,64}(?:token|passw(?:or)?d|secret|api[_-]?key|"
    r"credential|signature)[A-Za-z0-9_.-]{0,64}|key|sig|pwd|auth|access[_-]?key))"
    r"=(?P<value>[^&#\s'\"<>]*)",  # a value ends where the URL does (a quote around it)
    re.IGNORECASE,
)
# token shapes that are secrets wherever they appear: GitHub's (ghp_, gho_, ghu_, ghs_,
# ghr_, github_pat_), PyPI's API tokens, an Authorization header's or a bearer's credentials
_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|pypi-[A-Za-z0-9_-]{20,})"
    r"|(?P<scheme>\bAuthorization:[ \t]*(?:[A-Za-z]+[ \t]+)?|\bBearer[ \t]+)[^\s]{8,}",
)


def _redact_userinfo(text: str) -> str:
    """scheme://user:password@host → scheme://user:***@host; scheme://token@host →
    scheme://***@host. The user part runs to the last '@' before the path (a password may
    hold an unencoded '@'). One pass over the text: no regular expression to backtrack."""
    out: list[str] = []
    done = 0
    at = text.find("://")
    while at != -1:
        start = at
        while start > 0 and at - start < 32 and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        begin = at + 3
        end = begin
        while end < len(text) and text[end] not in _AUTHORITY_ENDS:
            end += 1
        user_end = text.rfind("@", begin, end)
        if start < at and user_end != -1:
            user, colon, _ = text[begin:user_end].partition(":")
            kept = f"{user}:{REDACTED}" if colon and user else REDACTED
            out.append(text[done:begin] + kept)
            done = user_end
        at = text.find("://", max(end, begin))
    out.append(text[done:])
    return "".join(out)


def redact(text: str) -> str:
    """`text` with every credential it holds replaced by `***`: a URL's password (or its
    token, when the user part has no ':'), the values of query parameters named like
    secrets (`token`, `password`, `key`, `sig`, `X-Amz-Signature`), GitHub and PyPI
    tokens, and an Authorization scheme's credentials."""
    if "@" in text and "://" in text:
        text = _redact_userinfo(text)
    if "=" in text:
        text = _SECRET_PARAMS.sub(lambda m: f"{m['key']}={REDACTED}", text)
    return _TOKENS.sub(lambda m: f"{m['scheme'] or ''}{REDACTED}", text)


def shown(text: object, *, newlines: bool = True) -> str:
    """`str(text)` as it may be shown: credentials redacted, then made printable."""
    return printable(redact(str(text)), newlines=newlines)


# Markdown's active punctuation: escapes, code, emphasis, links and images (brackets,
# parentheses, `!`), headings and list items, table cells, strikethrough; `<`, `>` and `&`
# become entities instead
_MD_ESCAPE = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def markdown(text: object) -> str:
    """`text` as inert Markdown on one line (a step summary, a table cell): printable, angle
    brackets and ampersands as entities (no HTML), and Markdown's punctuation escaped (no
    link, image, emphasis, heading or table-cell break)."""
    line = printable(str(text), newlines=False)
    line = line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_ESCAPE.sub(r"\\\1", line)


def markdown_code(text: object) -> str:
    """`text` as a Markdown code span on one line: printable, fenced by more backticks than
    it holds in a row, and its `|` escaped (GitHub's tables split a code span on it)."""
    line = printable(str(text), newlines=False).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"
