"""Where a project hard-codes its arch flags: setup.py (read with `ast`, never run),
pyproject.toml, CMake files and build scripts, each place with its line and the condition
around it as written (`archflags` says what they compile per CUDA version).

Forms: nvcc's `-gencode arch=compute_XX,code=sm_XX` (also `-gencode=`, `--generate-code`,
`code=[sm_XX,compute_XX]`, `code=compute_XX` for PTX), `-arch=sm_XX` (device code and PTX,
as nvcc expands it), `--gpu-architecture`, `-arch=native|all|all-major`; CMake's
`CMAKE_CUDA_ARCHITECTURES` / `CUDA_ARCHITECTURES` (`80` is device code and PTX, `80-real`
device code, `80-virtual` PTX); TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH set by the project;
hipcc's `--offload-arch=gfxNNN`. Every pattern is matched within one string or one line,
with no two quantifiers able to take the same characters, so its time is linear.
"""

from __future__ import annotations

__all__ = ["scan_cmake", "scan_pyproject", "scan_script", "scan_setup_py"]

import ast
import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Literal

from .archflags import SPECIAL, ArchFlag, Atom

_GENCODE = re.compile(
    r"(?<![\w-])arch=((?:compute|sm)_\d{2,3}[af]?)[ \t]*,[ \t]*code="
    r"(\[[^\]\n]*\]|\\?\"[^\"\n]*\"|'[^'\n]*'|[\w,]+)"
)
_GENCODE_TEMPLATE = re.compile(r"(?<![\w-])arch=compute_(\{[^}\n]*\}|\$\{?\w+\}?)")
_ARCH = re.compile(
    r"(?<![\w-])(?:-arch|--gpu-architecture)(?:=|[ \t]+)"
    r"((?:sm|compute)_\d{2,3}[af]?|native|all-major|all)\b"
)
_ARCH_ALONE = ("-arch", "--gpu-architecture")
_TARGET_ALONE = re.compile(r"(?:sm|compute)_\d{2,3}[af]?|native|all-major|all")
_OFFLOAD = re.compile(
    r"(?<![\w-])--(?:offload-arch|amdgpu-target)=(\{[^}\n]*\}|\$\{?\w+\}?|[\w:+,-]+)"
)
_CMAKE_DEF = re.compile(
    r"-DCMAKE_(CUDA|HIP)_ARCHITECTURES(?::STRING)?=(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"
)
_ENV_LIST = re.compile(
    r"(?<![\w$])(TORCH_CUDA_ARCH_LIST|PYTORCH_ROCM_ARCH)=(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"';]*)"
)
_TOML_ARCHS = re.compile(r"\bCMAKE_(CUDA|HIP)_ARCHITECTURES[ \t]*=[ \t]*(\"[^\"\n]*\"|'[^'\n]*')")
_CMAKE_SET = re.compile(
    r"\b(?:set[ \t]*\(|list[ \t]*\([ \t]*APPEND[ \t]+)[ \t]*(?:ENV\{)?"
    r"(CMAKE_CUDA_ARCHITECTURES|CMAKE_HIP_ARCHITECTURES|TORCH_CUDA_ARCH_LIST|PYTORCH_ROCM_ARCH)"
    r"\}?[ \t]+([^)\n]*)",
    re.IGNORECASE,
)
_CMAKE_PROP = re.compile(r"\b(CUDA|HIP)_ARCHITECTURES[ \t]+([^)\n]*)")
_CMAKE_IF = re.compile(r"[ \t]*(if|elseif|else|endif)[ \t]*\((.*)\)[ \t]*$", re.IGNORECASE)
# the variable is checked for CUDA…VERSION apart: `\w*CUDA\w*VERSION\w*` backtracks
_CMAKE_VERSION_TEST = re.compile(
    r"(NOT[ \t]+)?\$?\{?(\w+)\}?[ \t]+VERSION_(GREATER_EQUAL|GREATER|"
    r"LESS_EQUAL|LESS|EQUAL)[ \t]+\"?(\d+(?:\.\d+)*)\"?",
    re.IGNORECASE,
)
_CMAKE_OPS = {
    "GREATER_EQUAL": ">=",
    "GREATER": ">",
    "LESS_EQUAL": "<=",
    "LESS": "<",
    "EQUAL": "==",
}
_NEGATED = {">=": "<", ">": "<=", "<=": ">", "<": ">=", "==": "!=", "!=": "=="}
_CMAKE_KEYWORDS = {"CACHE", "PARENT_SCOPE", "FORCE"}
_MAX_TEXT = 100


def _cut(text: str, most: int = _MAX_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _code_list(value: str) -> tuple[str, ...]:
    """nvcc's code=… value: 'sm_80', '[sm_80,compute_80]', '"sm_80,compute_80"'."""
    items = value.strip("[]\\\"'").replace("\\", "").replace('"', "").split(",")
    return tuple(i.strip() for i in items if i.strip())


def _arch_targets(value: str) -> tuple[str, ...]:
    """-arch=VALUE as nvcc expands it alone: sm_XX is sm_XX plus compute_XX (PTX)."""
    if value.startswith("sm_"):
        return (value, "compute_" + value[3:])
    return (value,)


def _cmake_values(text: str, kind: str) -> tuple[str, ...]:
    """CMake's CUDA_ARCHITECTURES values: 80 → sm_80 + compute_80, 80-real → sm_80,
    80-virtual → compute_80; gfx targets as they are; ${VAR} kept as written."""
    out: list[str] = []
    for token in re.findall(r"\"[^\"\n]*\"|[^\s\"]+", text):
        if token in _CMAKE_KEYWORDS or re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", token):
            break  # CACHE …, or the next property of set_target_properties
        for item in token.strip("\"'").split(";"):
            value = item.strip()
            if not value:
                continue
            number = re.fullmatch(r"(\d{2,3}[af]?)(-real|-virtual)?", value)
            if kind == "rocm" or number is None:
                out.append(value.lower() if value.lower() in SPECIAL else value)
            elif number[2] == "-real":
                out.append(f"sm_{number[1]}")
            elif number[2] == "-virtual":
                out.append(f"compute_{number[1]}")
            else:
                out += [f"sm_{number[1]}", f"compute_{number[1]}"]
    return tuple(out)


def _env_values(value: str) -> tuple[str, ...]:
    return tuple(v for v in re.split(r"[;\s]+", value.strip("\"'")) if v)


Found = tuple[str, str, Literal["cuda", "rocm"], tuple[str, ...]]  # form, text, kind, targets


def _may_hold_flags(text: str) -> bool:
    """Every pattern here holds `arch` or `ARCH` (or hipcc's `amdgpu-target`): a line without
    them is passed over at the cost of a substring search."""
    return "arch" in text or "ARCH" in text or "amdgpu-target" in text


def flags_in_string(text: str, *, scripts: bool = False) -> Iterator[Found]:
    """The arch flags inside one string (a Python constant, a line of a script)."""
    if not _may_hold_flags(text):
        return
    for m in _GENCODE.finditer(text):
        yield "-gencode", m[0], "cuda", _code_list(m[2])
    for m in _GENCODE_TEMPLATE.finditer(text):
        yield "-gencode", m[0], "cuda", (m[1],)
    for m in _ARCH.finditer(text):
        yield "-arch", m[0], "cuda", _arch_targets(m[1])
    for m in _OFFLOAD.finditer(text):
        targets = (m[1],) if m[1][0] in "{$" else tuple(m[1].split(","))
        yield "--offload-arch", m[0], "rocm", targets
    for m in _CMAKE_DEF.finditer(text):
        kind: Literal["cuda", "rocm"] = "cuda" if m[1] == "CUDA" else "rocm"
        yield f"CMAKE_{m[1]}_ARCHITECTURES", m[0], kind, _cmake_values(m[2], kind)
    if scripts:
        for m in _ENV_LIST.finditer(text):
            kind = "cuda" if m[1] == "TORCH_CUDA_ARCH_LIST" else "rocm"
            form = "TORCH_CUDA_ARCH_LIST" if kind == "cuda" else "PYTORCH_ROCM_ARCH"
            yield form, m[0], kind, _env_values(m[2])


def scan_script(text: str, rel: str) -> list[ArchFlag]:
    """A build script's flags (.sh): line by line, its conditions not evaluated, not part of
    the build (a pip build does not run it)."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not _may_hold_flags(line) or line.lstrip().startswith("#"):
            continue
        for form, flag, kind, targets in flags_in_string(line, scripts=True):
            out.append(_flag(rel, number, (form, flag, kind, targets), in_build=False))
    return out


def scan_pyproject(text: str, rel: str = "pyproject.toml") -> list[ArchFlag]:
    """pyproject.toml's flags: scikit-build's CMAKE_CUDA_ARCHITECTURES define, cmake args."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not _may_hold_flags(line) or line.lstrip().startswith("#"):
            continue
        for m in _TOML_ARCHS.finditer(line):
            kind: Literal["cuda", "rocm"] = "cuda" if m[1] == "CUDA" else "rocm"
            targets = _cmake_values(m[2], kind)
            out.append(_flag(rel, number, (f"CMAKE_{m[1]}_ARCHITECTURES", m[0], kind, targets)))
        for form, flag, kind, targets in flags_in_string(line):
            if not form.startswith("CMAKE_") or not _TOML_ARCHS.search(line):
                out.append(_flag(rel, number, (form, flag, kind, targets)))
    return out


def _flag(
    rel: str,
    line: int,
    found: Found,
    *,
    in_build: bool = True,
    when: tuple[tuple[Atom, ...], str | None] = ((), None),
) -> ArchFlag:
    form, text, kind, targets = found
    return ArchFlag(
        file=rel,
        line=line,
        form=form,
        text=_cut(text),
        kind=kind,
        targets=targets,
        when=when[0],
        condition=when[1],
        in_build=in_build,
    )


# CMake ---------------------------------------------------------------------------------


def _strip_cmake_comment(line: str) -> str:
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return line[:i]
    return line


def _cmake_atoms(condition: str) -> tuple[Atom, ...]:
    """A CMake if() condition as conjuncts: CUDA version tests evaluated, the rest as text."""
    if re.search(r"\bOR\b", condition):
        return (("text", condition, True),)
    atoms: list[Atom] = []
    for part in re.split(r"[ \t]+AND[ \t]+", condition):
        test = _CMAKE_VERSION_TEST.fullmatch(part.strip())
        name = test[2].upper() if test else ""
        if test is None or "CUDA" not in name or "VERSION" not in name:
            atoms.append(("text", part.strip(), True))
            continue
        op = _CMAKE_OPS[test[3].upper()]
        atoms.append(("cuda", _NEGATED[op] if test[1] else op, test[4]))
    return tuple(atoms)


def _negate_one(atom: Atom) -> Atom | None:
    if atom[0] == "cuda":
        return ("cuda", _NEGATED[atom[1]], atom[2])
    if atom[0] == "const":
        return ("const", not atom[1])
    if atom[0] == "text":
        return ("text", atom[1], not atom[2])
    return None


def _negate(atoms: tuple[Atom, ...], text: str) -> Atom:
    """NOT (a AND b …): (NOT a) OR (NOT b) …"""
    negated = [_negate_one(a) for a in atoms]
    if any(n is None for n in negated):
        return ("text", text, False)
    if len(negated) == 1 and negated[0] is not None:
        return negated[0]
    return ("or", tuple((n,) for n in negated if n is not None))


def scan_cmake(text: str, rel: str, *, in_build: bool) -> list[ArchFlag]:
    """A CMake file's arch settings, each under the if()/elseif()/else() branches around it."""
    # per open if(): the conditions of the branches before this one, and this branch's
    branches: list[tuple[list[tuple[tuple[Atom, ...], str]], tuple[tuple[Atom, ...], str] | None]]
    branches = []
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        line = _strip_cmake_comment(raw)
        block = _CMAKE_IF.match(line)
        if block is not None:
            word, cond = block[1].lower(), block[2].strip()
            if word == "if":
                branches.append(([], (_cmake_atoms(cond), cond)))
            elif branches and word in ("elseif", "else"):
                before, current = branches[-1]
                if current is not None:
                    before = [*before, current]
                branches[-1] = (before, (_cmake_atoms(cond), cond) if word == "elseif" else None)
            elif branches and word == "endif":
                branches.pop()
            continue
        found: list[Found] = []
        for m in _CMAKE_SET.finditer(line):
            name = m[1].upper()
            kind: Literal["cuda", "rocm"] = "rocm" if "HIP" in name or "ROCM" in name else "cuda"
            if name in ("TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH"):
                found.append((name, m[0], kind, _env_values(m[2].split(" CACHE")[0])))
            else:
                found.append((name, m[0], kind, _cmake_values(m[2], kind)))
        for m in _CMAKE_PROP.finditer(line):
            kind = "cuda" if m[1] == "CUDA" else "rocm"
            found.append((f"{m[1]}_ARCHITECTURES", m[0], kind, _cmake_values(m[2], kind)))
        found += [f for f in flags_in_string(line) if not f[0].startswith("CMAKE_")]
        if not found:
            continue
        atoms: list[Atom] = []
        texts: list[str] = []
        for before, current in branches:
            for prior_atoms, prior_text in before:
                atoms.append(_negate(prior_atoms, prior_text))
                texts.append(f"NOT ({prior_text})")
            if current is not None:
                atoms += current[0]
                texts.append(current[1])
        when = (tuple(atoms), _cut(" AND ".join(texts), 2 * _MAX_TEXT) if texts else None)
        for form, flag, kind, targets in found:
            out.append(
                _flag(rel, number, (form, flag, kind, targets), in_build=in_build, when=when)
            )
    return out


# setup.py ------------------------------------------------------------------------------

_PY_OPS: dict[type[ast.cmpop], str] = {
    ast.GtE: ">=",
    ast.Gt: ">",
    ast.LtE: "<=",
    ast.Lt: "<",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_READS_LIST = re.compile(
    r"""(?:getenv|environ\.get|environ\[)[ \t]*\(?[ \t]*["']TORCH_CUDA_ARCH_LIST"""
)
_VERSION_CALLS = {"Version", "parse", "LooseVersion", "StrictVersion", "parse_version"}
_ENV_NAMES = {"TORCH_CUDA_ARCH_LIST": "cuda", "PYTORCH_ROCM_ARCH": "rocm"}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Call) and len(node.args) <= 1 and not node.keywords:
        inner = _dotted(node.func)
        if inner and inner.rsplit(".", 1)[-1] in _VERSION_CALLS and node.args:
            return _dotted(node.args[0])  # Version(torch.version.cuda)
        return f"{inner}()" if inner and not node.args else None
    return None


def _release(node: ast.AST) -> str | None:
    """The release a CUDA version is compared with: Version("12.8"), "12.8", 12.8, (12, 8)."""
    if isinstance(node, ast.Call) and len(node.args) == 1:
        name = _dotted(node.func) or ""
        if name.rsplit(".", 1)[-1] in _VERSION_CALLS:
            return _release(node.args[0])
        return None
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        text = str(node.value) if isinstance(node.value, (int, float, str)) else ""
        return text if re.fullmatch(r"\d+(?:\.\d+)*", text) else None
    if isinstance(node, ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts
    ):
        return ".".join(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return None


def _is_cuda_version(name: str | None) -> bool:
    low = (name or "").lower()
    return bool(re.search(r"cuda|bare_metal|nvcc", low)) and not re.search(r"hip|rocm", low)


def _known(name: str, negated: bool) -> Atom | None:
    """A build-kind test's value in a CUDA build: a ROCm/HIP branch is not taken, a SKIP
    switch is off, torch.version.cuda and CUDA_HOME are set, is_available() is made True."""
    low = name.lower()
    value: bool | None = None
    if re.search(r"hip|rocm", low) or "skip" in low:
        value = False
    elif low in ("torch.version.cuda", "torch.cuda.is_available()", "cuda_home", "cuda_path"):
        value = True
    return None if value is None else ("const", value != negated)


def _atoms(node: ast.expr, negated: bool, written: Callable[[ast.expr], str]) -> list[Atom]:
    """A Python test as conjuncts (De Morgan through `not`, `and`, `or`)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _atoms(node.operand, not negated, written)
    if isinstance(node, ast.BoolOp):
        parts = [tuple(_atoms(v, negated, written)) for v in node.values]
        if isinstance(node.op, ast.And) != negated:  # a and b, not (a or b)
            return [a for part in parts for a in part]
        return [("or", tuple(parts))]  # a or b, not (a and b)
    atom = _simple(node, negated)
    if atom is not None:
        return [atom]
    return [("text", _cut(written(node)), not negated)]


def _simple(node: ast.expr, negated: bool) -> Atom | None:
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant):
            name = _dotted(left)
            if right.value is None and name is not None:
                return _known(name, negated != isinstance(op, ast.Is))
            return None
        sign = _PY_OPS.get(type(op))
        if sign is None:
            return None
        release = _release(right)
        name = _dotted(left)
        if release is None:  # the release on the left: 12.8 <= cuda
            release, name = _release(left), _dotted(right)
            sign = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}.get(sign, sign)
        if release is None or not _is_cuda_version(name):
            return None
        if name and name.endswith(".minor"):
            return None
        return ("cuda", _NEGATED[sign] if negated else sign, release)
    name = _dotted(node)
    return _known(name, negated) if name else None


class _SetupScan(ast.NodeVisitor):
    """Walks setup.py in source order with the conditions (if, elif, else, x if c else y)
    around each node."""

    def __init__(self, source: str, rel: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.rel = rel
        self.conditions: list[tuple[ast.expr, bool]] = []
        self.flags: list[ArchFlag] = []
        self.previous = ""  # the string constant before this one: "-gencode", "-arch"

    def written(self, node: ast.expr) -> str:
        """`node` as written (ast.get_source_segment, without splitting the file each time)."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if node.end_col_offset is None or last >= len(self.lines) or last - first > 20:
            return ast.unparse(node)
        chunk = [line.encode() for line in self.lines[first : last + 1]]
        chunk[-1] = chunk[-1][: node.end_col_offset]
        chunk[0] = chunk[0][node.col_offset :]
        return " ".join(b"".join(chunk).decode(errors="replace").split())

    def _when(self) -> tuple[tuple[Atom, ...], str | None]:
        atoms = [a for test, neg in self.conditions for a in _atoms(test, neg, self.written)]
        texts = []
        for test, neg in self.conditions:
            text = self.written(test)
            texts.append(f"not ({text})" if neg else text)
        return tuple(atoms), (_cut(" and ".join(texts), 2 * _MAX_TEXT) if texts else None)

    def _add(self, line: int, found: Found, *, overrides: bool = True) -> None:
        flag = _flag(self.rel, line, found, when=self._when())
        if not overrides:
            flag = dataclasses.replace(flag, overrides=False)
        self.flags.append(flag)

    def _branch(self, test: ast.expr, body: list[ast.AST], orelse: list[ast.AST]) -> None:
        self.visit(test)
        for negated, nodes in ((False, body), (True, orelse)):
            self.conditions.append((test, negated))
            for node in nodes:
                self.visit(node)
            self.conditions.pop()

    def visit_If(self, node: ast.If) -> None:
        self._branch(node.test, list(node.body), list(node.orelse))

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._branch(node.test, [node.body], [node.orelse])

    def _string(self, text: str, line: int) -> None:
        if self.previous in _ARCH_ALONE and _TARGET_ALONE.fullmatch(text):
            self._add(line, ("-arch", f"{self.previous} {text}", "cuda", _arch_targets(text)))
        else:
            paired = self.previous in ("-gencode", "--generate-code")
            for form, flag, kind, targets in flags_in_string(text):
                shown = f"{self.previous} {flag}" if paired and form == "-gencode" else flag
                self._add(line, (form, shown, kind, targets))
        self.previous = text.strip()

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._string(node.value, node.lineno)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        self._string("".join(parts), node.lineno)

    def _env(self, key: ast.AST, value: ast.AST, line: int, *, overrides: bool) -> bool:
        """os.environ["TORCH_CUDA_ARCH_LIST"] = value (or setdefault): True when it is one."""
        if not (isinstance(key, ast.Constant) and key.value in _ENV_NAMES):
            return False
        kind: Literal["cuda", "rocm"] = "cuda" if _ENV_NAMES[key.value] == "cuda" else "rocm"
        written = self.written(value) if isinstance(value, ast.expr) else ""
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            targets = _env_values(value.value)
        else:
            targets = ("{" + _cut(written) + "}",)
        found = (str(key.value), f"{key.value} = {written}", kind, targets)
        self._add(line, found, overrides=overrides)
        return True

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if (
                isinstance(target, ast.Subscript)
                and (_dotted(target.value) or "").endswith("environ")
                and self._env(target.slice, node.value, node.lineno, overrides=True)
            ):
                return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func) or ""
        if (
            name.endswith("environ.setdefault")
            and len(node.args) == 2
            and self._env(node.args[0], node.args[1], node.lineno, overrides=False)
        ):
            return
        self.generic_visit(node)


def scan_setup_py(text: str, rel: str = "setup.py") -> list[ArchFlag]:
    """setup.py's arch flags, read with `ast` (nothing runs); a file this Python cannot parse
    is scanned line by line, without conditions."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        out = []
        for number, line in enumerate(text.splitlines(), 1):
            for found in flags_in_string(line.split("#", 1)[0]):
                out.append(_flag(rel, number, found))
        return out
    scan = _SetupScan(text, rel)
    with contextlib.suppress(RecursionError):  # a pathologically deep file: what was found
        scan.visit(tree)
    if _READS_LIST.search(text) is None:
        return scan.flags
    # -gencode=arch=compute_{num} built from a value read when it builds, by a setup.py
    # that reads TORCH_CUDA_ARCH_LIST (xformers'): most likely the cell's list
    return [
        dataclasses.replace(f, follows_list=True)
        if f.kind == "cuda" and any(t.startswith(("{", "$")) for t in f.targets)
        else f
        for f in scan.flags
    ]
