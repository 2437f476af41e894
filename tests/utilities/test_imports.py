"""``trainmesh.utilities.imports`` answers as Lightning 2.6's ``lightning.pytorch.utilities.imports``
(programs import ``_TORCHVISION_AVAILABLE`` from it; the port stopped at the import before)."""

from __future__ import annotations

import pytest

from trainmesh.utilities import imports

pytest.importorskip("lightning.pytorch")


def test_every_flag_of_lightning_s_module_answers_the_same():
    import lightning.pytorch.utilities.imports as theirs

    flags = [n for n in vars(theirs) if n.startswith("_") and not n.startswith("__") and n != "_try_import_module"]
    assert "_TORCHVISION_AVAILABLE" in flags
    for name in flags:
        assert bool(getattr(imports, name)) == bool(getattr(theirs, name)), name
        if not isinstance(getattr(theirs, name), bool):  # a RequirementCache: its sentence too
            assert str(getattr(imports, name)) == str(getattr(theirs, name)), name
    assert imports._try_import_module("json") is theirs._try_import_module("json") is True


def test_a_requirement_reads_versions_and_specifier_ranges():
    assert imports._satisfies("2.13.0+cpu", ">=2.8.0") and not imports._satisfies("2.13.0", ">=2.8.0,<2.9.0")
    assert imports._satisfies("2.8.1", ">=2.8.0,<2.9.0") and imports._satisfies("1.0", "==1.0.0")
    assert not imports._Requirement("no-such-distribution>=1")
    with pytest.raises(ValueError, match="specifier"):
        imports._satisfies("1.0", "~=1.0")


def test_a_bare_name_without_its_distribution_is_available_when_its_module_imports():
    """Lightning's RequirementCache falls back to importing a module of that name (a package on the
    path without installed metadata, like these tests' ``helpers``); its sentence still says "not met"."""
    from lightning_utilities.core.imports import RequirementCache

    for name in ("helpers", "helpers.no_such_module", "no_such_module_here"):
        theirs, ours = RequirementCache(name), imports._Requirement(name)
        assert (bool(ours), str(ours)) == (bool(theirs), str(theirs)), name
    assert imports._Requirement("helpers") and not imports._Requirement("helpers>=1")
