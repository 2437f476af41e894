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


REQUIREMENTS = [
    ("torch>=0.1", None),
    ("torch>100.0", None),
    ("torch", None),
    ("unknown_package", None),
    (None, "torch.utils"),
    (None, "unknown.module.path"),
    ("unknown_package>=1.0", "torch"),
    ("numpy>=1.0,<100", None),
]


@pytest.mark.parametrize(("requirement", "module"), REQUIREMENTS)
def test_requirement_cache_answers_as_lightning_s(requirement, module):
    """``RequirementCache`` and ``compare_version`` were missing from the inventory's
    ``utilities.imports`` (programs import them beside the flags)."""
    theirs = pytest.importorskip("lightning_utilities.core.imports")
    from trainmesh.utilities.imports import RequirementCache

    ours, lightning = RequirementCache(requirement, module), theirs.RequirementCache(requirement, module)
    assert (bool(ours), str(ours)) == (bool(lightning), str(lightning))


def test_compare_version_answers_as_lightning_s():
    import operator

    theirs = pytest.importorskip("lightning_utilities.core.imports")
    from trainmesh.utilities.imports import compare_version

    for args in [("torch", operator.ge, "2.0"), ("torch", operator.lt, "2.0"), ("nothing_here", operator.ge, "0")]:
        assert compare_version(*args) == theirs.compare_version(*args)
    assert compare_version("torch", operator.ge, "2.13", use_base_version=True) == theirs.compare_version(
        "torch", operator.ge, "2.13", use_base_version=True
    )
