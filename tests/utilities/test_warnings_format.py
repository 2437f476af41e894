"""trainmesh's warnings shown as Lightning 2.6 shows its own (its ``warnings.formatwarning``, set on
import): ``file:line: message`` without the category and source line, so a program's stderr reads
the same under both (the tutorials' "PossibleUserWarning: ..." lines and the extra
``rank_zero_warn(`` line were trainmesh's only)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import trainmesh
from helpers.forked import can_fork
from helpers.processes import run_code_forked

pytest.importorskip("lightning.pytorch")

_PROGRAM = textwrap.dedent(
    """
    import sys, warnings
    import {package}
    from {warnings_module} import PossibleUserWarning
    for filename in sys.argv[1:]:
        sys.stdout.write(warnings.formatwarning("few batches", PossibleUserWarning, filename, 7))
    """
)

# Lightning's side, in a fork of the fork server (helpers/forked.py), which imported torch, its
# torch._dynamo and trainmesh already: `import lightning.pytorch` in a new interpreter imports
# those too (about 5 CPU-s). trainmesh's import replaced warnings.formatwarning there; Python's
# own is put back first, as a new interpreter has it, so that Lightning's formatter falls back to
# Python's for a file not its own, not to trainmesh's.
_PYTHONS_OWN_FIRST = textwrap.dedent(
    """
    import warnings
    import trainmesh.utilities.warnings

    warnings.formatwarning = trainmesh.utilities.warnings._default_format_warning
    own = warnings.formatwarning
    assert (own.__module__, own.__qualname__) == ("warnings", "formatwarning"), own
    """
)


def _shown(package: str, warnings_module: str, *filenames: str, cwd=None) -> list[str]:
    """What ``warnings`` prints for a warning raised at each file, once ``package`` is imported:
    in a new interpreter, or (``cwd`` given) in a fork of the fork server, where it can fork."""
    program = _PROGRAM.format(package=package, warnings_module=warnings_module)
    if cwd is not None and can_fork():
        out = run_code_forked(_PYTHONS_OWN_FIRST + program, list(filenames), timeout=300, cwd=cwd)
    else:
        src = os.path.dirname(os.path.dirname(trainmesh.__file__))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", program, *filenames], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_library_s_warnings_show_as_lightning_s(tmp_path):
    import lightning.pytorch.loops.fit_loop as lightning_fit_loop

    import trainmesh.trainer.fit_loop as trainmesh_fit_loop

    user = str(tmp_path / "train.py")
    lightning = ("lightning.pytorch", "lightning.fabric.utilities.warnings")
    expected = _shown(*lightning, lightning_fit_loop.__file__, user, cwd=tmp_path)
    assert expected[0] == f"{lightning_fit_loop.__file__}:7: few batches"
    assert expected[1] == f"{user}:7: PossibleUserWarning: few batches"  # a program's own: Python's format
    found = _shown("trainmesh", "trainmesh.utilities.warnings", trainmesh_fit_loop.__file__, user)
    assert found == [f"{trainmesh_fit_loop.__file__}:7: few batches", expected[1]]
