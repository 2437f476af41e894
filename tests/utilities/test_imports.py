"""``trainmesh.utilities.imports`` answers as Lightning 2.6's ``lightning.pytorch.utilities.imports``
for every flag it defines, in this environment (``_TORCHVISION_AVAILABLE``: examples read it before
importing torchvision)."""

from __future__ import annotations

import re

import pytest

from trainmesh.utilities import imports

lightning_imports = pytest.importorskip("lightning.pytorch.utilities.imports")


def test_every_flag_of_lightnings_imports_module_answers_the_same():
    flags = [name for name in vars(lightning_imports) if re.fullmatch(r"_[A-Z0-9_]+", name)]
    assert "_TORCHVISION_AVAILABLE" in flags
    for name in flags:
        assert bool(getattr(imports, name)) == bool(getattr(lightning_imports, name)), name
    assert imports._try_import_module("json") is True


def test_a_requirement_not_met_says_why():
    missing = imports.RequirementCache("torch<1")
    assert not missing
    assert "torch" in missing.message and "installed" in missing.message
