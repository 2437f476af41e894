"""A package's names imported on first use (PEP 562's module ``__getattr__``).

``import trainmesh`` must not import torch, so the packages whose face names heavy classes
(``trainmesh``, ``.strategies``, ``.callbacks``, ``.launchers``, ``.utilities``) keep a table of
where each name lives and import it when it is first read. Each package's ``__getattr__`` and
``__dir__`` call these two functions with its own table, which tests may replace.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# A table entry: the module that defines the name under the same name (a submodule of the package by
# its bare name, any other by its dotted one), or a
# (module, attribute) pair for a name defined elsewhere or under another name.
Where = str | tuple[str, str]


def lazy_attribute(
    package: str, namespace: dict[str, Any], table: Mapping[str, Where], name: str, *, submodules: bool = True
) -> Any:
    """``package.name``: imported from where ``table`` says, then kept in ``namespace`` so that later
    reads are plain attribute reads; else, with ``submodules``, the submodule of that name
    (``tm.callbacks.progress``, as before the names became lazy)."""
    where = table.get(name)
    if where is not None:
        module, attribute = where if isinstance(where, tuple) else (_module(package, where), name)
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value
    if submodules:
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as missing:
            if missing.name != f"{package}.{name}":  # the submodule exists and fails its own import
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def lazy_dir(namespace: Iterable[str], table: Iterable[str]) -> list[str]:
    """What ``dir(package)`` shows: what is imported already and what would be on first use."""
    return sorted({*namespace, *table})


def _module(package: str, where: str) -> str:
    # a dotted name is a whole module's (``trainmesh.cli.lightning_parser``), a bare one a submodule's
    return where if "." in where else f"{package}.{where}"


def is_instance(value: Any, module: str, *names: str) -> bool:
    """``isinstance(value, module.name)`` for any of ``names``, without importing ``module``: where it
    was never imported, no object can be an instance of its classes (an instance's class, a subclass's
    included, imports the module that defines it), so the answer is False and the import is saved."""
    imported = sys.modules.get(module)
    return imported is not None and isinstance(value, tuple(getattr(imported, name) for name in names))


def alias_of(*packages: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` answering with the names and submodules of ``packages`` (the
    first that has the name), so that a face's module (``lightning.fabric.strategies``) is the package the
    Trainer's side uses (``trainmesh.strategies``) without a copy of its table, nor its import before first
    use. Dunder names are the face module's own: answering ``__path__`` with the package's would make the face
    a package of the same files, and ``import face.sub`` a second copy of each module (its classes other
    classes); the face's submodule paths are registered by :func:`alias_modules`."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module has no attribute {name!r}")
        for package in packages:
            found = importlib.import_module(package)
            if hasattr(found, name):
                return getattr(found, name)
            # a submodule not imported yet (``types``, ``fsdp``); a module has none
            if hasattr(found, "__path__") and importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {packages[0]!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({n for package in packages for n in dir(importlib.import_module(package))})

    return __getattr__, __dir__


def alias_modules(face: str, paths: Mapping[str, str | tuple[str, ...]]) -> None:
    """Each ``face.<path>`` importable (as ``os`` makes ``os.path``): a module answering with the names of the
    module(s) ``paths`` gives for it, through :func:`alias_of`, so that a face's module paths
    (``lightning.fabric.plugins.environments.slurm``) give the very objects trainmesh's modules hold, with no
    file each and nothing imported before first use. Parents first: ``paths`` is walked in sorted order, and
    each module is set on its parent as an attribute, as an import sets a submodule. The face and each of these
    modules get an empty ``__path__`` (a package of no files): an importer that maps other names onto them
    (``lightning.fabric`` onto ``trainmesh.fabric``) may look below them, and finds only what is registered."""
    if not hasattr(sys.modules[face], "__path__"):
        sys.modules[face].__path__ = []
    for path in sorted(paths):
        name = f"{face}.{path}"
        if name in sys.modules:
            continue
        targets = paths[path]
        targets = (targets,) if isinstance(targets, str) else targets
        module = types.ModuleType(name, f"``{name}``: the names of ``{'``, ``'.join(targets)}``.")
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        module.__getattr__, module.__dir__ = alias_of(*targets)  # type: ignore[method-assign]
        sys.modules[name] = module
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
