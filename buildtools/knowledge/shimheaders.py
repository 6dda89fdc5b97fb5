"""What a torch release's stable C headers declare, and which of it the stable C++ headers call.

The LibTorch stable ABI is a C surface: the `AOTI_TORCH_EXPORT` functions of the stable C
headers (`torch/csrc/inductor/aoti_torch/c/*.h`, the generated
`torch/csrc/inductor/aoti_torch/generated/c_shim_*.h`, `torch/csrc/stable/c/*.h`; R14),
each behind the `#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z` of the release that added
it (2.10 on). The C++ of `torch/csrc/stable/*.h` and `torch/headeronly/` is inline: what an
extension imports through it is the shims those inline functions call. `declarations`
reads one header, `calls` one inline header; `ci/refresh-stable-abi.py` runs them on every
release's headers and `stableabi.merge` keeps the result in `data/stable_abi.json`.
Pure text processing: no compiler, no preprocessor, comments and line continuations taken
out first; a declaration is `AOTI_TORCH_EXPORT <return type> <name>(`.
"""

from __future__ import annotations

__all__ = [
    "INLINE_HEADERS",
    "SHIM_HEADERS",
    "VERSION_HEADER",
    "Declaration",
    "abi_version",
    "calls",
    "declarations",
    "is_inline_header",
    "is_shim_header",
]

import fnmatch
import re
from dataclasses import dataclass

# members of a torch wheel (paths under torch/include/) that hold the stable C surface
SHIM_HEADERS = (
    "torch/csrc/inductor/aoti_torch/c/*.h",
    "torch/csrc/inductor/aoti_torch/generated/c_shim_*.h",
    "torch/csrc/stable/c/*.h",
)
# the inline C++ of the stable ABI: it calls shims, it exports nothing
INLINE_HEADERS = ("torch/csrc/stable/*.h", "torch/headeronly/*")
VERSION_HEADER = "torch/headeronly/version.h"  # TORCH_ABI_VERSION, 2.10 on

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING_RE = re.compile(r'"(?:\\.|[^"\\\n])*"')
_FEATURE_RE = re.compile(r"^TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_(\d+)$")
_DIRECTIVE_RE = re.compile(r"^\s*#\s*(\w+)\s*(.*?)\s*$")
_EXPORT_RE = re.compile(r"\bAOTI_TORCH_EXPORT\b([^;{()]*?)\b([A-Za-z_]\w*)\s*\(", re.S)
_IGNORED = frozenset({"__cplusplus", "defined(__cplusplus)"})  # extern "C" wrappers
_SHIM_CALL_RE = re.compile(r"\b((?:aoti_torch|torch)_\w+)\s*\(")


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """One shim a header declares: the release its `TORCH_FEATURE_VERSION` guard names (None:
    unguarded) and any other condition it sits under (`USE_CUDA`)."""

    name: str
    guard: str | None
    conditions: tuple[str, ...] = ()


def is_shim_header(member: str) -> bool:
    """Whether a wheel member (under torch/include/) is one of the stable C headers."""
    return member.endswith(".h") and any(fnmatch.fnmatchcase(member, p) for p in SHIM_HEADERS)


def is_inline_header(member: str) -> bool:
    """Whether a wheel member (under torch/include/) is inline C++ of the stable ABI."""
    return member.endswith(".h") and any(fnmatch.fnmatchcase(member, p) for p in INLINE_HEADERS)


def _code(text: str) -> str:
    """The header without comments or line continuations; line breaks kept where they were."""
    text = text.replace("\\\n", " ")

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match[0])

    text = _STRING_RE.sub(blank, text)
    return _COMMENT_RE.sub(blank, text)


@dataclass
class _Branch:
    guard: str | None  # the feature release this branch needs
    condition: str | None  # any other condition, as written


def _branch(directive: str, rest: str) -> _Branch:
    if rest in _IGNORED:
        return _Branch(guard=None, condition=None)
    if directive == "ifdef":
        return _Branch(guard=None, condition=rest)
    if directive == "ifndef":
        return _Branch(guard=None, condition=f"!{rest}")
    match = _FEATURE_RE.match(rest)
    if match:
        return _Branch(guard=".".join(str(int(g)) for g in match.groups()), condition=None)
    return _Branch(guard=None, condition=rest or directive)


def _include_guard(stack: list[_Branch], rest: str, directive: str) -> bool:
    return not stack and directive == "ifndef" and rest.isupper()


def declarations(text: str) -> dict[str, Declaration]:
    """Every `AOTI_TORCH_EXPORT` function of one header: name → its declaration. A name
    declared twice (once per branch of an #if) keeps the branch with the newest guard."""
    code = _code(text)
    stack: list[_Branch] = []
    out: dict[str, Declaration] = {}
    lines = code.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    state: list[tuple[str | None, tuple[str, ...]]] = []  # per line: its guard and conditions
    body: list[str] = []  # the lines without preprocessor directives (a #define is no export)
    for line in lines:
        directive = _DIRECTIVE_RE.match(line)
        body.append(" " * len(line) if directive is not None else line)
        if directive is not None:
            word, rest = directive[1], directive[2]
            if word in ("if", "ifdef", "ifndef"):
                if _include_guard(stack, rest, word):
                    stack.append(_Branch(guard=None, condition=None))
                else:
                    stack.append(_branch(word, rest))
            elif word in ("else", "elif") and stack:
                top = stack[-1]
                negated = (
                    f"!({top.guard or top.condition})" if (top.guard or top.condition) else None
                )
                stack[-1] = _Branch(guard=None, condition=negated)
            elif word == "endif" and stack:
                stack.pop()
            state.append((None, ()))
            continue
        guards = [b.guard for b in stack if b.guard]
        newest = max(guards, key=_version_key) if guards else None
        state.append((newest, tuple(b.condition for b in stack if b.condition)))
    for match in _EXPORT_RE.finditer("\n".join(body)):
        guard, conditions = state[_line_of(starts, match.start())]
        name = match[2]
        seen = out.get(name)
        if seen is not None and _version_key(seen.guard or "0") >= _version_key(guard or "0"):
            continue
        out[name] = Declaration(name=name, guard=guard, conditions=conditions)
    return out


def _line_of(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def calls(text: str) -> frozenset[str]:
    """The shim-like names (`aoti_torch_*`, `torch_*`) an inline header calls."""
    return frozenset(m[1] for m in _SHIM_CALL_RE.finditer(_code(text)))


_DEFINE_RE = re.compile(
    r"^\s*#\s*define\s+TORCH_VERSION_(MAJOR|MINOR|PATCH|ABI_TAG)\s+(\d+)\s*$", re.M
)


def abi_version(text: str) -> str | None:
    """TORCH_ABI_VERSION of `torch/headeronly/version.h` as 16 hex digits (None: not there)."""
    parts = {m[1]: int(m[2]) for m in _DEFINE_RE.finditer(_code(text))}
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return None
    value = (parts["MAJOR"] << 56) | (parts["MINOR"] << 48) | (parts["PATCH"] << 40)
    return f"0x{value | parts.get('ABI_TAG', 0):016x}"
