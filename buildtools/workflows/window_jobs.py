"""release.yml's smoke-only legs: a published stable-ABI wheel proven on a new torch.

`smoke-window-<family>` (one per family with an x86_64 smoke runner) runs only when the
run was started with `window` cells (the backfill does, for a torch released inside a
published wheel's window: `ciplan.smokeonly`). It builds nothing: each leg downloads the
published wheel from the URL the authenticated record gives, refuses any other bytes than
the record's sha256, runs `nox -s smoke -- --window-torch <torch>` on a runner of the
wheel's family and, as every smoke leg of a release, outputs its report's sha256
(`report_<leg>`). The wheel goes on to the prepare job as `wheels-window-<cell>`; the
plan job's `window_built_<family>` output (the record's bytes) stands for the build leg
that would have reported it, so selection, bundle check and index are the release's own.
"""

from __future__ import annotations

__all__ = ["window_built_env", "window_plan_output", "window_smoke_job"]

from typing import Any

from ..ciplan import layout
from ..ciplan.labels import Label, runs_on
from ..ciplan.smokeonly import WINDOW_LEGS, window_job
from ..model import RUNNER_ACCELERATOR_ENV
from .jobparts import WorkflowSpec
from .scripts import bash, smoked_script


def window_built_env(family: str) -> str:
    """The variable holding the plan's window wheels of `family` (BT_BUILT_WINDOW_CPU)."""
    return f"BT_BUILT_WINDOW_{family.upper()}"


def window_plan_output(family: str) -> str:
    """The plan job's output with `family`'s window wheels, `{"wheels_window": …}`."""
    return f"${{{{ needs.plan.outputs.window_built_{family} }}}}"


def _download_script() -> str:
    """The published wheel into the wheelhouse, checked against the record's sha256."""
    wheel = f"{layout.WHEELHOUSE}/$BT_WHEEL"
    return bash(
        # the name and digest come from the plan job's output; still, a name is a name
        "if ! [[ $BT_WHEEL =~ ^[A-Za-z0-9_.+!-]+[.]whl$ ]] || "
        "! [[ $BT_WHEEL_SHA256 =~ ^[0-9a-f]{64}$ ]]; then",
        '  echo "::error::the plan gave no wheel name and sha256 for $BT_CELL"',
        "  exit 1",
        "fi",
        f"mkdir -p {layout.WHEELHOUSE}",
        f'curl --fail --silent --show-error --location --proto "=https" --max-time 900 '
        f'--retry 3 --output "{wheel}" "$BT_WHEEL_URL"',
        f'got="$(sha256sum < "{wheel}" | cut -d" " -f1)"',
        'if [ "$got" != "$BT_WHEEL_SHA256" ]; then',
        '  echo "::error::$BT_WHEEL from $BT_WHEEL_URL has sha256 $got; the published record '
        'says $BT_WHEEL_SHA256: not the published wheel, nothing is tested or published"',
        "  exit 1",
        "fi",
        'echo "$BT_WHEEL: sha256 $got, as the published record says"',
    )


def _smoke_script(matrix: str, family: str) -> str:
    argv = [*layout.smoke_argv(matrix, family)]
    return bash(
        "{",
        '  echo "### Smoke-only: $BT_WHEEL on torch $BT_WINDOW_TORCH (no build)"',
        "  echo",
        "  echo 'The same test on your machine, with the published wheel:'",
        "  echo",
        "  echo '```sh'",
        '  echo "$BT_REPRODUCE"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        layout.join(argv) + ' --window-torch "$BT_WINDOW_TORCH"',
    )


def window_smoke_job(wf: WorkflowSpec, family: str, label: Label) -> dict[str, Any]:
    """`smoke-window-<family>`: the published wheel smoke-tested on a new torch, no build."""
    job = window_job(family)
    flag = f"needs.plan.outputs.{layout.run_flag(job)} == 'true'"
    steps: list[dict[str, Any]] = [
        wf.checkout(),
        wf.setup_python("${{ matrix.python_versions }}"),
        wf.install_tools(),
        {
            "name": "Download the published wheel (the record's sha256)",
            "env": {
                "BT_CELL": "${{ matrix.id }}",
                "BT_WHEEL": "${{ matrix.wheel }}",
                "BT_WHEEL_URL": "${{ matrix.url }}",
                "BT_WHEEL_SHA256": "${{ matrix.sha256 }}",
            },
            "run": _download_script(),
        },
        {
            "name": "Smoke test on the new torch (nox -s smoke -- --window-torch)",
            "env": {
                "BT_WHEEL": "${{ matrix.wheel }}",
                "BT_WINDOW_TORCH": "${{ matrix.window_torch }}",
                "BT_REPRODUCE": "${{ matrix.reproduce }}",
                RUNNER_ACCELERATOR_ENV: family,
            },
            "run": _smoke_script(wf.matrix, family),
        },
        {
            "name": "Report the smoke report's sha256",
            "id": "smoked",
            "env": {"BT_LEG": "${{ strategy.job-index }}"},
            "run": smoked_script(),
        },
        wf.upload("wheels-window-${{ matrix.id }}", f"{layout.WHEELHOUSE}/*.whl", wheels=True),
        wf.upload(
            "smoke-window-${{ matrix.id }}", f"{layout.SMOKE_OUT}/", always=True, missing="ignore"
        ),
    ]
    return {
        "name": f"smoke-only ${{{{ matrix.id }}}} ({family}, published wheel)",
        "needs": ["plan"],
        "if": "${{ !cancelled() && needs.plan.result == 'success' && " + flag + " }}",
        "runs-on": runs_on(label),
        "timeout-minutes": layout.SMOKE_TIMEOUT,
        "permissions": {"contents": "read"},
        # one leg per window cell; a leg's output only that leg can set (as smoke-<family>)
        "outputs": {
            f"report_{n}": f"${{{{ steps.smoked.outputs.report_{n} }}}}" for n in range(WINDOW_LEGS)
        },
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.plan.outputs.{layout.output_name(job)}) }}}}",
        },
        "steps": steps,
    }
