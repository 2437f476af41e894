"""The inventory of Lightning Fabric's public API, generated from the installed package.

Every public module path of `lightning.fabric` 2.6 (found by walking the installed package: a program may
import any of them), each module's public names (its `__all__`, or the classes and functions it defines or
gathers from its submodules, as `lightning_inventory.py` reads Lightning's), `Fabric`'s constructor
arguments and its members, each looked up at the same place in trainmesh (`lightning.fabric.X` as
`trainmesh.fabric.X`, `Fabric.x` on `trainmesh.Fabric`).

`python tests/helpers/lightning_inventory.py --write` rewrites `docs/fabric-api.md` beside
`docs/lightning-api.md`; `tests/test_lightning_inventory.py` fails when Fabric has a name the table does
not list or when a row's status is no longer true.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator

from helpers.lightning_inventory import REPO, STATUSES, Row, citing_test, counts, defined_names, read_table

TABLE = REPO / "docs" / "fabric-api.md"
ROOT = "lightning.fabric"
PATHS = "import lightning.fabric."  # the area of the module paths' rows: the name is the path


@functools.cache
def fabric_modules() -> tuple[str, ...]:
    """Every public module path under `lightning.fabric` (no part starting with "_")."""
    package = importlib.import_module(ROOT)
    found = []
    for info in pkgutil.walk_packages(package.__path__, f"{ROOT}.", onerror=lambda name: None):
        path = info.name.removeprefix(f"{ROOT}.")
        if not any(part.startswith("_") for part in path.split(".")):
            found.append(path)
    return tuple(sorted(found))


def _public_names(module_path: str) -> list[str]:
    module = importlib.import_module(module_path)
    if getattr(module, "__all__", None):  # Fabric's own `__all__` lists private launchers, `_runif_reasons`
        return sorted(n for n in module.__all__ if not n.startswith("_"))
    return defined_names(module)


def fabric_names() -> Iterator[tuple[str, str]]:
    """(area, name) for every public name of the installed Lightning Fabric."""
    from lightning.fabric import Fabric

    for path in fabric_modules():
        yield PATHS, path
    for path in ("", *fabric_modules()):
        area = ROOT + (f".{path}" if path else "") + "."
        for name in _public_names(area.rstrip(".")):
            yield area, name
    for name in inspect.signature(Fabric.__init__).parameters:
        if name != "self":
            yield "Fabric(", name
    for name in sorted(n for n in dir(Fabric) if not n.startswith("_")):
        yield "Fabric.", name


def trainmesh_has(area: str, name: str, fabric_class: type) -> bool:
    if area == PATHS:
        try:
            importlib.import_module(f"trainmesh.fabric.{name}")
        except ImportError:
            return False
        return True
    if area == "Fabric(":
        return name in inspect.signature(fabric_class.__init__).parameters
    if area == "Fabric.":
        return hasattr(fabric_class, name)
    try:
        module = importlib.import_module("trainmesh.fabric" + area.removeprefix(ROOT).rstrip("."))
    except ImportError:
        return False
    return hasattr(module, name)


def refusal(area: str, name: str) -> str | None:
    """The reason written on the object trainmesh gives for the name (``__refused__``), if any."""
    from trainmesh.utilities.refusal import refusal_of

    if area == PATHS or not area.startswith(ROOT):
        return None
    module = importlib.import_module("trainmesh.fabric" + area.removeprefix(ROOT).rstrip("."))
    return refusal_of(getattr(module, name, None))


def _test_texts() -> tuple[dict[str, str], dict[str, str]]:
    """Every test file's text, and those of the tests that run Lightning Fabric itself beside trainmesh."""
    texts = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if path.name != "test_lightning_inventory.py":
            texts[str(path.relative_to(REPO))] = path.read_text()
    runs_fabric = re.compile(
        r"^\s*(import|from) (lightning\.fabric|lightning_fabric)\b|importorskip\(\"(lightning\.fabric|lightning_fabric)"
        r"|^\s*from lightning import [^\n]*\bFabric\b",
        re.MULTILINE,
    )
    return texts, {p: t for p, t in texts.items() if runs_fabric.search(t)}


def build_rows() -> list[Row]:
    import trainmesh

    tests, against_fabric = _test_texts()
    rows = []
    for area, name in sorted(set(fabric_names())):
        if not trainmesh_has(area, name, trainmesh.Fabric):
            rows.append(Row(area, name, "missing", ""))
        elif (reason := refusal(area, name)) is not None:
            rows.append(Row(area, name, "refused", reason.replace("|", "/")))
        elif compared := citing_test(name, against_fabric):
            rows.append(Row(area, name, "same", compared))
        else:
            rows.append(Row(area, name, "present", citing_test(name, tests)))
    return rows


HEADER = """# Lightning Fabric's API in trainmesh

Generated from the installed `lightning` {version} (`python tests/helpers/lightning_inventory.py --write`,
which writes [lightning-api.md](lightning-api.md) too); `tests/test_lightning_inventory.py` fails when Lightning
Fabric has a name this table does not list, or when a row is no longer true.

Each public name is looked up at the same place in trainmesh (`lightning.fabric.plugins.X` as
`trainmesh.fabric.plugins.X`, `Fabric(x=...)` and `Fabric.x` on `trainmesh.Fabric`). The rows of area
`import lightning.fabric.` are Fabric's public module paths (every module under the package, none of whose
parts starts with `_`), each imported as `trainmesh.fabric.<path>`: a program may import its names by any of
them. Status:

- **same**: trainmesh has the name and a test that runs Lightning Fabric itself beside trainmesh names it
  (the test beside it; found by the name appearing in that test file, so it says a comparison with Fabric
  reaches the name, not that every argument is covered);
- **present**: trainmesh has the name; no comparison with Fabric names it yet (the test beside it, if any, is
  a trainmesh test that names it);
- **refused**: trainmesh has the name and stops with the reason given when it is used;
- **missing**: trainmesh has no such name.

Counts: {counts}.

| area | name | status | test or reason |
|---|---|---|---|
"""


def count_line(rows: list[Row]) -> str:
    tally = counts(rows)
    return ", ".join(f"{tally[s]} {s}" for s in STATUSES) + f" of {len(rows)}"


def render(rows: list[Row]) -> str:
    import lightning

    text = HEADER.format(version=lightning.__version__, counts=count_line(rows))
    for r in rows:
        text += f"| `{r.area}` | `{r.name}` | {r.status} | {r.evidence} |\n"
    return text


def write_table() -> None:
    TABLE.write_text(render(build_rows()))
    print(f"wrote {TABLE.relative_to(REPO)}: {counts(read_table(TABLE))}")
