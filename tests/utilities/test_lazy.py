"""trainmesh.utilities.lazy: the packages' names imported on first use (PEP 562)."""

from __future__ import annotations

import sys

import pytest

from trainmesh.utilities.lazy import is_instance, lazy_attribute, lazy_dir


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``pkg`` with a submodule ``a`` (defines ``A``), ``b`` (defines ``Other``) and ``broken``."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("A = 'from a'\n")
    (root / "b.py").write_text("Other = 'from b'\n")
    (root / "broken.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "pkg"
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        del sys.modules[name]


def test_a_name_is_imported_from_its_submodule_on_first_read_and_kept(package):
    namespace: dict = {}
    table = {"A": "a", "B": ("pkg.b", "Other"), "C": "pkg.b"}
    assert "pkg.a" not in sys.modules
    assert lazy_attribute(package, namespace, table, "A") == "from a"
    assert "pkg.a" in sys.modules and namespace == {"A": "from a"}  # later reads are plain reads
    assert lazy_attribute(package, namespace, table, "B") == "from b"  # (module, attribute)
    with pytest.raises(AttributeError, match="Other|C"):  # a dotted module defines the name itself
        lazy_attribute(package, namespace, table, "C")


def test_a_submodule_is_an_attribute_only_where_the_package_allows_it(package):
    assert lazy_attribute(package, {}, {}, "b").Other == "from b"
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'b'"):
        lazy_attribute(package, {}, {}, "b", submodules=False)
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nothing'"):
        lazy_attribute(package, {}, {}, "nothing")


def test_a_submodule_that_fails_its_own_import_says_why(package):
    # not "no attribute": the submodule exists, and what it could not import is the reason to show
    with pytest.raises(ModuleNotFoundError, match="no_such_module_anywhere"):
        lazy_attribute(package, {}, {}, "broken")


def test_is_instance_answers_without_importing_a_module_that_was_never_imported(package, tmp_path):
    (tmp_path / "pkg" / "c.py").write_text("class C: ...\nclass D: ...\nclass E(C): ...\n")
    assert not is_instance(object(), "pkg.c", "C")  # never imported: no instance can exist
    assert "pkg.c" not in sys.modules
    import pkg.c

    assert is_instance(pkg.c.E(), "pkg.c", "C")  # a subclass's instance, as isinstance
    assert is_instance(pkg.c.D(), "pkg.c", "C", "D")  # any of several names
    assert not is_instance(pkg.c.D(), "pkg.c", "C")


def test_dir_lists_what_is_imported_and_what_would_be():
    assert lazy_dir({"x": 1, "A": 2}, {"A": "a", "B": "b"}) == ["A", "B", "x"]


def test_the_packages_faces_are_lazy_through_it():
    import trainmesh
    import trainmesh.callbacks
    import trainmesh.profilers

    assert "Trainer" in dir(trainmesh) and "ModelCheckpoint" in dir(trainmesh.callbacks)
    assert "SimpleProfiler" in dir(trainmesh.profilers)
    with pytest.raises(AttributeError, match="module 'trainmesh.profilers' has no attribute 'Nope'"):
        trainmesh.profilers.Nope  # noqa: B018
