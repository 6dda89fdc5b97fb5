"""The command's start: a verb imports its own modules, not every other verb's."""

from __future__ import annotations

import subprocess
import sys


def test_a_verb_imports_its_own_modules_only() -> None:
    """`buildtools build` of an unchanged cell is mostly the command's start: it must not
    import every other verb (the index's coverage, smoke runs, CI steps)."""
    probe = (
        "import sys\n"
        "from buildtools.cli.main import main\n"
        "try:\n"
        "    main(['build', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('buildtools.cli.')))\n"
        "print('buildtools.index.coverage' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == "['buildtools.cli.build', 'buildtools.cli.common', 'buildtools.cli.main']"
    assert lines[-1] == "False"
