"""The inventory of Lightning's public API, generated from the installed packages.

Every public name of `lightning.pytorch` 2.6 (the subpackages' `__all__`, the commonly imported
utility modules, the Trainer's arguments and members, the LightningModule's, LightningDataModule's
and Callback's own members), and the names of pytorch-lightning 1.9.5 that 2.x removed (recorded
by `record_lightning_1_9_names.py` in a venv of its own, since 1.9.5 and 2.6 cannot share one),
each looked up at the same place in trainmesh.

`python tests/helpers/lightning_inventory.py --write` rewrites `docs/lightning-api.md` from the
installed Lightning, keeping each listed name's reason where one was written by hand;
`tests/test_lightning_inventory.py` fails when Lightning has a name the table does not list or
when a row's status is no longer true.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import pkgutil
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "lightning-api.md"
RECORDED_1_9 = Path(__file__).resolve().parent / "lightning_1_9_names.json"

# The subpackages whose `__all__` is the public face, and the utility modules programs import
# by path (their public functions and classes, re-exports from lightning_fabric included).
PACKAGES = (
    "",
    "callbacks",
    "loggers",
    "profilers",
    "strategies",
    "plugins",
    "plugins.environments",
    "accelerators",
    "utilities",
    "core",
    "demos",
    "serve",
)
MODULES = (
    "tuner",
    "cli",
    "utilities.model_helpers",
    "utilities.rank_zero",
    "utilities.seed",
    "utilities.grads",
    "utilities.types",
    "utilities.memory",
    "utilities.deepspeed",
    "utilities.parsing",
    "utilities.combined_loader",
    "utilities.imports",
    "utilities.signature_utils",
    "utilities.apply_func",  # 1.9's (2.0 removed it): lightning-bolts' callbacks import it
    "utilities.distributed",  # 1.9's (2.0 removed it): the latent-diffusion models import rank_zero_only from it
    "utilities.cloud_io",  # 1.9's (2.0 moved it to Fabric): `load as pl_load` in 1.x programs
    "demos.mnist_datamodule",
    "demos.boring_classes",
)

# Names trainmesh refuses on purpose: the name exists and its use stops with this reason.
REFUSED: dict[str, str] = {}

STATUSES = ("same", "present", "refused", "missing")


@dataclass(frozen=True)
class Row:
    area: str  # where the name lives: a module path, or "Trainer(...)" / "Trainer." / "LightningModule." ...
    name: str
    status: str  # same | present | refused | missing
    evidence: str  # the test that shows it (same), the reason (refused), or empty

    @property
    def key(self) -> str:
        return f"{self.area}{self.name}"


def _module_names(root: str, path: str) -> list[str]:
    try:
        module = importlib.import_module(root + (f".{path}" if path else ""))
    except ImportError:  # a module the other version does not have
        return []
    if path in PACKAGES and getattr(module, "__all__", None):
        return sorted(module.__all__)
    return defined_names(module)


def defined_names(module: ModuleType) -> list[str]:
    """A module's public classes and functions by where they are defined (no ``__all__`` asked)."""
    # A module's own classes and functions, and those it re-exports from Fabric's module of the
    # same name (`utilities.rank_zero` re-exports `rank_zero_only`); not what it merely imports.
    # A package without `__all__` (1.9's `strategies`, `accelerators`; `plugins.environments`):
    # what it imports from its own submodules, or from Fabric's package of the same name.
    name_of_module = module.__name__
    leaf = name_of_module.rsplit(".", 1)[-1]
    fabric = name_of_module.replace("lightning.pytorch", "lightning.fabric").replace(
        "pytorch_lightning", "lightning_fabric"
    )
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        origin = getattr(value, "__module__", "") or ""
        if (
            origin == name_of_module
            or (origin.startswith(("lightning", "pytorch_lightning")) and origin.endswith(f".{leaf}"))
            or (hasattr(module, "__path__") and origin.startswith((f"{name_of_module}.", f"{fabric}.")))
        ):
            names.append(name)
    return sorted(names)


def _member_names(cls: type, *, minus: type | None = None) -> list[str]:
    inherited = set(dir(minus)) if minus is not None else set()
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in inherited)


def _instance_names(trainer_class: type) -> set[str]:
    """What a Trainer sets on itself as it is built (2.x's ``fit_loop``, ``validate_loop``,
    ``val_check_batch``, ``state``, ...): members programs read that ``dir`` of the class misses."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trainer_class(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return {n for n in vars(trainer) if not n.startswith("_")}


@functools.cache
def public_modules(root: str) -> tuple[str, ...]:
    """Every public module path under ``root`` (no part starting with "_"), found by walking the
    installed package: a program may import from any of them (``lightning.pytorch.core.optimizer``,
    ``callbacks.callback``), so each is looked up, not only the packages listed above. Only for
    Lightning 2.x: 1.9.5's names were recorded with the lists above."""
    if root != "lightning.pytorch":
        return ()
    package = importlib.import_module(root)
    found = []
    for info in pkgutil.walk_packages(package.__path__, f"{root}.", onerror=lambda name: None):
        path = info.name.removeprefix(f"{root}.")
        if not any(part.startswith("_") for part in path.split(".")) and path not in PACKAGES + MODULES:
            found.append(path)
    return tuple(sorted(found))


def lightning_names(root: str = "lightning.pytorch") -> Iterator[tuple[str, str]]:
    """(area, name) for every public name of the installed Lightning (2.x, or 1.x as `pytorch_lightning`)."""
    import torch

    L = importlib.import_module(root)
    for path in PACKAGES + MODULES + public_modules(root):
        area = root + (f".{path}" if path else "") + "."
        for name in _module_names(root, path):
            yield area, name
    for name in inspect.signature(L.Trainer.__init__).parameters:
        if name != "self":
            yield "Trainer(", name
    for name in sorted(set(_member_names(L.Trainer)) | _instance_names(L.Trainer)):
        yield "Trainer.", name
    for name in _member_names(L.LightningModule, minus=torch.nn.Module):
        yield "LightningModule.", name
    for name in _member_names(L.LightningDataModule):
        yield "LightningDataModule.", name
    for name in _member_names(L.Callback):
        yield "Callback.", name


def removed_1_9_names() -> Iterator[tuple[str, str]]:
    """(area, name) for pytorch-lightning 1.9.5's names that Lightning 2.x no longer has."""
    current = set(lightning_names())
    for area, name in json.loads(RECORDED_1_9.read_text())["names"]:
        area_2x = area.replace("pytorch_lightning", "lightning.pytorch")
        if (area_2x, name) not in current:
            yield "1.9 " + area_2x, name


def _trainmesh_place(area: str) -> tuple[str, str | None]:
    """The trainmesh module or class where a Lightning area's names would live."""
    area = area.removeprefix("1.9 ")
    if area.startswith("lightning.pytorch."):
        return "module", "trainmesh" + area.removeprefix("lightning.pytorch").rstrip(".")
    return "member", area.rstrip(".(")


def _trainmesh_objects() -> dict[str, object]:
    import trainmesh as tm

    class _Module(tm.Module):
        pass

    trainer = tm.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return {
        "Trainer(": inspect.signature(tm.Trainer.__init__).parameters,
        "Trainer": trainer,
        "LightningModule": _Module(),
        "LightningDataModule": tm.DataModule(),
        "Callback": tm.Callback(),
    }


def trainmesh_has(area: str, name: str, objects: dict[str, object]) -> bool:
    kind, place = _trainmesh_place(area)
    if kind == "module":
        assert place is not None
        try:
            module = importlib.import_module(place)
        except ImportError:
            return False
        return hasattr(module, name)
    if area.removeprefix("1.9 ") == "Trainer(":
        return name in objects["Trainer("]  # type: ignore[operator]
    if name in dir(objects[place or ""]):
        return True
    # A hook the base class does not define (so that an override can be seen) is present when
    # the Trainer calls it by name.
    return place in ("LightningModule", "LightningDataModule", "Callback") and name in _names_the_trainer_calls()


@functools.cache
def _names_the_trainer_calls() -> frozenset[str]:
    found: set[str] = set()
    for path in (REPO / "src" / "trainmesh" / "trainer").rglob("*.py"):
        found.update(re.findall(r"[\"']([a-z_]+)[\"']", path.read_text()))
    return frozenset(found)


def citing_test(name: str, tests: dict[str, str]) -> str:
    """The first test file naming ``name`` as a whole word (not inside a longer identifier)."""
    if re.fullmatch(r"\w+", name):
        # The same answer as the pattern below, from each file's words (its maximal runs of \w):
        # 861 names x 300 files of regex searches took 9.4 CPU-s of the inventory test's 10.8 s.
        return next((path for path, words in _words_of(tests) if name in words), "")
    pattern = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
    for path, text in tests.items():
        if pattern.search(text):
            return path
    return ""


_WORDS: dict[tuple[str, str], frozenset[str]] = {}


def _words_of(tests: dict[str, str]) -> list[tuple[str, frozenset[str]]]:
    """Each file's set of words, in the dict's order (computed once per file text)."""
    for path, text in tests.items():
        if (path, text) not in _WORDS:
            _WORDS[path, text] = frozenset(re.findall(r"\w+", text))
    return [(path, _WORDS[path, text]) for path, text in tests.items()]


def _test_texts() -> tuple[dict[str, str], dict[str, str]]:
    """Every test file's text, and those of the tests that run Lightning itself beside trainmesh."""
    texts = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        # Not this table's own test, nor the signature comparison (it names every callable to
        # compare parameters; it runs no program under Lightning).
        # Nor the Fabric face's tests (tests/fabric/ and below): they run Lightning Fabric, not the names of this table.
        if (
            path.name not in ("test_lightning_inventory.py", "test_lightning_signatures.py")
            and "fabric" not in (path.relative_to(REPO / "tests").parts[:-1])
        ):
            texts[str(path.relative_to(REPO))] = path.read_text()
    against_lightning = {
        p: t
        for p, t in texts.items()
        if re.search(r"^\s*(import lightning|from lightning[. ])|importorskip\(\"lightning", t, re.MULTILINE)
    }
    return texts, against_lightning


def refusal(area: str, name: str) -> str | None:
    """Why trainmesh refuses a name it has: written on the object itself (``__refused__``, what
    ``trainmesh.utilities.refusal`` gives the classes it makes, the same text the user is shown; on a
    Trainer member's property or method for those Lightning 1.8 removed), in
    the Trainer's table of refused arguments, or in ``REFUSED`` here."""
    from trainmesh.trainer.lightning1.trainer_arguments import REFUSED_ARGUMENTS
    from trainmesh.trainer.lightning2_arguments import REFUSED_ARGUMENTS as REFUSED_2X_ARGUMENTS
    from trainmesh.utilities.refusal import refusal_of

    if f"{area}{name}" in REFUSED:
        return REFUSED[f"{area}{name}"]
    if area.removeprefix("1.9 ") == "Trainer(":
        return REFUSED_ARGUMENTS.get(name) or REFUSED_2X_ARGUMENTS.get(name)
    kind, place = _trainmesh_place(area)
    if kind == "member" and place == "Trainer":  # a member 1.8 removed: its property or method carries the reason
        import trainmesh

        member = inspect.getattr_static(trainmesh.Trainer, name, None)
        return refusal_of(getattr(member, "fget", member))
    if kind != "module" or place is None:
        return None
    return refusal_of(getattr(importlib.import_module(place), name, None))


def build_rows() -> list[Row]:
    objects = _trainmesh_objects()
    tests, against_lightning = _test_texts()
    rows = []
    for area, name in sorted(set(lightning_names()) | set(removed_1_9_names())):
        if not trainmesh_has(area, name, objects):
            rows.append(Row(area, name, "missing", ""))
        elif (reason := refusal(area, name)) is not None:
            rows.append(Row(area, name, "refused", reason.replace("|", "/")))
        elif compared := citing_test(name, against_lightning):
            rows.append(Row(area, name, "same", compared))
        else:
            rows.append(Row(area, name, "present", citing_test(name, tests)))
    return rows


HEADER = """# Lightning's API in trainmesh

Generated from the installed `lightning` {version} and a recording of pytorch-lightning 1.9.5's
names (`python tests/helpers/lightning_inventory.py --write`); `tests/test_lightning_inventory.py`
fails when Lightning has a name this table does not list, or when a row is no longer true.

Each public name is looked up at the same place in trainmesh (`lightning.pytorch.callbacks.X` as
`trainmesh.callbacks.X`, `Trainer.x` on `trainmesh.Trainer`, `LightningModule.x` on
`trainmesh.Module`). Status:

- **same**: trainmesh has the name and a test that runs the same program under Lightning itself
  names it (the test beside it; found by the name appearing in that test file, so it says a
  comparison with Lightning reaches the name, not that every argument is covered);
- **present**: trainmesh has the name (for a hook the base class leaves undefined so that an
  override can be seen: the Trainer calls it by name); no comparison with Lightning names it yet
  (the test beside it, if any, is a trainmesh test that names it);
- **refused**: trainmesh has the name and stops with the reason given when it is used;
- **missing**: trainmesh has no such name.

Counts: {counts}.

| area | name | status | test or reason |
|---|---|---|---|
"""


def counts(rows: list[Row]) -> dict[str, int]:
    return {status: sum(r.status == status for r in rows) for status in STATUSES}


def render(rows: list[Row]) -> str:
    import lightning

    tally = counts(rows)
    text = HEADER.format(
        version=lightning.__version__,
        counts=", ".join(f"{tally[s]} {s}" for s in STATUSES) + f" of {len(rows)}",
    )
    for r in rows:
        text += f"| `{r.area}` | `{r.name}` | {r.status} | {r.evidence} |\n"
    return text


def read_table(path: Path = TABLE) -> list[Row]:
    rows = []
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"\| `([^`]*)` \| `([^`]*)` \| (\w+) \| (.*) \|", line)
        if match:
            rows.append(Row(*match.groups()))
    return rows


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/helpers/lightning_inventory.py --write")
    sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(render(build_rows()))
    print(f"wrote {TABLE.relative_to(REPO)}: {counts(read_table())}")
    from helpers.fabric_inventory import write_table  # Fabric's half of the owner's API: docs/fabric-api.md

    write_table()
