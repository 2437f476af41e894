"""The layering rules of docs/architecture.md, checked statically over the source with ``ast``.

Nothing here imports trainmesh: the checks read the files, so they are fast and they still
run when an import-time bug would hide a violation. Each checker is a plain function from a
parsed file to a list of ``"path:line: what"`` entries; the self-tests at the bottom feed each
one a small violating snippet, so a checker that silently stops matching fails too.

``python tests/test_architecture.py`` prints every check's entries and the functions longer
than the house limit (reported, not asserted).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = SRC / "trainmesh"

MAX_FILE_LINES = 500  # "files under ~500 lines"
MAX_FUNCTION_LINES = 60  # "functions under ~60"
# "A rule met only at its limit is a sign to redesign": nothing within 5% of a cap (docs/architecture.md).
MARGIN = 0.05

# The Trainer side: it talks to the Runtime, never to a strategy.
TRAINER_SIDE = ("trainmesh.trainer", "trainmesh.callbacks", "trainmesh.module", "trainmesh.manual_calls")
# The one strategies module whose value types (StepHooks, StepResult) cross the layers.
STEP_TYPES_MODULE = "trainmesh.strategies.step"
# Lower layers, and what they must never import.
LOWER_LAYERS = (
    "trainmesh.strategies",
    "trainmesh.launchers",
    "trainmesh.checkpoint",
    "trainmesh.utilities",
    "trainmesh.precision",
    "trainmesh.accelerators",
    "trainmesh.accelerator_types",
    "trainmesh.plugins",
    "trainmesh.seed",
    "trainmesh.supervision",
)
# The one door (DESIGN: "The trainer side"): the Trainer side reaches the distributed world only
# through the Runtime. From these packages it imports nothing but the names below.
OUTSIDE_THE_DOOR = (
    "torch.distributed",
    "trainmesh.launchers",
    "trainmesh.strategies",
    "trainmesh.checkpoint",
    "trainmesh.supervision",
)
THROUGH_THE_DOOR = {
    # Value types: frozen dataclasses, exceptions, constants. ``tokens_in`` reads the user's step
    # output ({"loss", "num_tokens"}): the step's contract, a pure function of a value.
    # ``ManualSync``: the contract of a manual-optimization step (how its calls meet the
    # strategy), whose base runs each call as it comes; the strategy hands in its own.
    "trainmesh.strategies.step": {"ManualSync", "StepHooks", "StepResult", "tokens_in"},
    "trainmesh.launchers.base": {"ProcessInfo"},
    # whether a line was said already by the process that started this one: a predicate of the
    # process's environment, no collective (the Trainer's construction lines, trainer/construction_lines.py)
    "trainmesh.launchers.agent_link": {"said_by_the_agent_process"},
    "trainmesh.checkpoint.keys": {"CheckpointKeys"},
    "trainmesh.supervision": {"DEFAULT_WATCHDOG_TIMEOUT", "PREEMPTION_CHECKPOINT", "Preempted", "StuckRankError"},
    # Lightning's keys of a checkpoint dict (its version, loops counters, scaler key): pure functions of values
    "trainmesh.checkpoint.lightning_keys": {
        "lightning_loops",
        "precision_entries",
        "saved_precision_state",
        "version_entry",
        "written_by_lightning",
    },
    # checkpoint/'s public face: files and paths, no collective ("last"/"best" resolution, reading
    # and removing one checkpoint, format checks); sharded saves and loads, and the background
    # writer (AsyncCheckpointIO: its own process group), go through the Runtime (checkpoint/saves.py).
    "trainmesh.checkpoint": {
        "CheckpointKeys",
        "CheckpointPlaces",
        "DamagedCheckpoint",
        "LastCheckpoints",
        "UnreadableCheckpoint",
        "atomic_save",
        "check_state_dict_fits",
        "check_weights_only",
        "checkpoint_entries",
        "content_problem",
        "finish_interrupted_swaps",
        "load_checkpoint_file",
        "remove_checkpoint",
        "remove_interrupted_saves",
        "resolve_checkpoint",
    },
}
# The Runtime's own modules: the Runtime, its optimizer wrapper, its checkpoint service, the
# strategy choice and the Trainer's port. Only these reach the Runtime's underscore members.
RUNTIME_MODULES = (
    "trainmesh.runtime",
    "trainmesh.runtime_optimizer",
    "trainmesh.runtime_checkpoints",
    "trainmesh.runtime_choice",
    "trainmesh.runtime_port",
)
HIGHER_LAYERS = (
    "trainmesh.trainer",
    "trainmesh.callbacks",
    "trainmesh.module",
    "trainmesh.cli",
    "trainmesh.loggers",
    *RUNTIME_MODULES,
)
# Layers between: each, and what above it it must never import either (at any depth). The Runtime
# is below the Trainer side, the Module, the tools and the Keras bridge that run on it; the scaling
# tools run models on a Runtime (with the Trainer's optimizer parsing and FLOP counting) below the cli.
MIDDLE_LAYERS = {
    **{
        module: (*(h for h in HIGHER_LAYERS if h not in RUNTIME_MODULES), "trainmesh.scaling", "trainmesh.keras")
        for module in RUNTIME_MODULES
    },
    "trainmesh.scaling": ("trainmesh.cli", "trainmesh.keras"),
}
# What the Trainer runs: the Module (and its manual-optimization calls) and the callbacks see the
# Trainer through TrainerView (trainer_view.py), so they never import the loop, nor each other
# (Lightning's siblings), nor the tools above; at any depth, a lazy import inside a function included.
_ABOVE_THE_TRAINER_USERS = ("trainmesh.trainer", "trainmesh.cli", "trainmesh.scaling", "trainmesh.keras")
TRAINER_USERS = {
    "trainmesh.module": (*_ABOVE_THE_TRAINER_USERS, "trainmesh.callbacks"),
    # The Module's members split out of module.py: its logging and its manual-optimization calls
    "trainmesh.module_log_calls": (*_ABOVE_THE_TRAINER_USERS, "trainmesh.callbacks"),
    "trainmesh.module_manual_optimization": (*_ABOVE_THE_TRAINER_USERS, "trainmesh.callbacks"),
    "trainmesh.manual_calls": (*_ABOVE_THE_TRAINER_USERS, "trainmesh.callbacks", "trainmesh.module"),
    "trainmesh.callbacks": (*_ABOVE_THE_TRAINER_USERS, "trainmesh.module", "trainmesh.manual_calls"),
}


# Lightning 1.x's package, and the doors through which the rest enters it (docs/architecture.md): the runner
# choice (1.x's loops), the hook dispatcher (1.x's hooks and signatures) and the Trainer's construction (1.x's
# Trainer arguments, which the CLI reads there too).
LIGHTNING1 = "trainmesh.trainer.lightning1"
LIGHTNING1_DOORS = (
    "trainmesh.trainer.optimization.runners",
    "trainmesh.trainer.hooks",
    "trainmesh.trainer.construction",
)
# What of Lightning 1.x's package each door imports: 1.x's loops, 1.x's hooks, 1.x's Trainer arguments (the
# construction's door holds arguments only: a callback's 1.x hook names come through the dispatcher).
LIGHTNING1_DOOR_SCOPES = {
    "trainmesh.trainer.optimization.runners": (f"{LIGHTNING1}.optimizer_turns", f"{LIGHTNING1}.tbptt"),
    "trainmesh.trainer.hooks": (
        f"{LIGHTNING1}.legacy_hooks",
        f"{LIGHTNING1}.optimizer_hooks",
        f"{LIGHTNING1}.step_end",
    ),
    "trainmesh.trainer.construction": (
        f"{LIGHTNING1}.legacy_arguments",
        f"{LIGHTNING1}.trainer_arguments",
        f"{LIGHTNING1}.argparse_arguments",
        f"{LIGHTNING1}.trainer_members",  # 1.x's Trainer members (resume_from_checkpoint, tune, ...)
    ),
}
# Where ``global_step`` is written: the count of optimizer steps (its one owner), and the restores.
GLOBAL_STEP_WRITERS = {
    ("trainmesh.trainer.optimization.progress", "count_optimizer_steps"),  # every optimizer step
    ("trainmesh.trainer.checkpointing", "restore_checkpoint"),  # a checkpoint's count
    ("trainmesh.trainer.peer_state", "load_loop_state"),  # a live peer's (fault tolerance)
    ("trainmesh.trainer.worker_outcome", "adopt"),  # the launched workers' count, in the launching process
}
# The names under which the Trainer side holds a user's module or callback.
USER_OBJECTS = {"module", "pl_module", "model", "callback", "obj", "datamodule"}


# ---- reading the source -------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    path: str  # relative to the repository, as printed in the entries
    module: str  # dotted name; a package's __init__ is the package's name
    is_package: bool
    text: str
    tree: ast.Module

    @functools.cached_property
    def nodes(self) -> tuple[ast.AST, ...]:
        """``ast.walk(self.tree)``, walked once: each check below walks every module's tree (the
        file's 90 tests took 6.5 CPU-s walking them again, 3.4 with this)."""
        return tuple(ast.walk(self.tree))


def parse(
    text: str, *, module: str = "trainmesh.snippet", path: str = "snippet.py", is_package: bool = False
) -> Source:
    return Source(path, module, is_package, text, ast.parse(text, filename=path))


@functools.lru_cache(maxsize=1)
def sources() -> tuple[Source, ...]:
    found = []
    for file in sorted(PACKAGE.rglob("*.py")):
        parts = list(file.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        text = file.read_text()
        found.append(Source(str(file.relative_to(REPO)), ".".join(parts), is_package, text, ast.parse(text, str(file))))
    return tuple(found)


def known_modules() -> dict[str, bool]:
    """Every trainmesh module name -> whether it is a package (an ``__init__``)."""
    return {source.module: source.is_package for source in sources()}


def within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # the module named by the statement, relative imports resolved
    names: tuple[str, ...]  # for ``from module import a, b``; empty for ``import module``


def imports(source: Source) -> Iterator[Import]:
    """Every import statement, at any depth: inside functions, ``if TYPE_CHECKING:`` blocks
    included (a lazy or typing-only import is still a dependency of the design)."""
    for node in source.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            yield Import(node.lineno, _absolute(source, node), tuple(alias.name for alias in node.names))


def _absolute(source: Source, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = source.module.split(".") if source.is_package else source.module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_targets(statement: Import, modules: dict[str, bool]) -> list[str]:
    """The modules a statement loads: ``from a import b`` is ``a.b`` when that is a module,
    else ``a``; ``import a.b.c`` is the longest prefix that is a module."""
    if not statement.names:
        parts = statement.module.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return [".".join(parts[:end])]
        return [statement.module]
    return [
        f"{statement.module}.{name}" if f"{statement.module}.{name}" in modules else statement.module
        for name in statement.names
    ]


def entry(source: Source, node: ast.AST | int, what: str) -> str:
    line = node if isinstance(node, int) else getattr(node, "lineno", 0)
    return f"{source.path}:{line}: {what}"


# ---- the checkers: each returns its entries, empty when the rule holds --------------------------
def getattr_delegation(source: Source) -> list[str]:
    """(a) A class that defines ``__getattr__`` (or ``__getattribute__``) forwards what it does
    not have to another object: between strategies that hides which one does the work."""
    found = []
    for cls in (node for node in source.nodes if isinstance(node, ast.ClassDef)):
        for item in cls.body:
            names = []
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [item.name]
            elif isinstance(item, ast.Assign):  # __getattr__ = _forward
                names = [t.id for t in item.targets if isinstance(t, ast.Name)]
            for name in names:
                if name in ("__getattr__", "__getattribute__"):
                    found.append(entry(source, item, f"class {cls.name} defines {name}"))
    return found


_ENVIRON_WRITERS = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def environment_writes(source: Source) -> list[str]:
    """(b) Writes to the process environment: ``os.environ[k] = v``, ``del os.environ[k]``,
    ``os.environ.setdefault/update/pop/...``, ``os.putenv/unsetenv``, with ``import os as x``
    and ``from os import environ, putenv`` spellings followed."""
    os_names, environ_names, function_names = {"os"}, set(), set()
    for node in source.nodes:
        if isinstance(node, ast.Import):
            os_names |= {alias.asname or alias.name for alias in node.names if alias.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            environ_names |= {alias.asname or alias.name for alias in node.names if alias.name == "environ"}
            function_names |= {
                alias.asname or alias.name for alias in node.names if alias.name in ("putenv", "unsetenv")
            }

    def is_environ(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in environ_names
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        )

    found = []
    for node in source.nodes:
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Subscript) and is_environ(target.value):
                verb = "del os.environ[...]" if isinstance(node, ast.Delete) else "os.environ[...] = ..."
                found.append(entry(source, node, verb))
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _ENVIRON_WRITERS and is_environ(func.value):
                found.append(entry(source, node, f"os.environ.{func.attr}(...)"))
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in ("putenv", "unsetenv")
                and isinstance(func.value, ast.Name)
                and func.value.id in os_names
            ):
                found.append(entry(source, node, f"os.{func.attr}(...)"))
            elif isinstance(func, ast.Name) and func.id in function_names:
                found.append(entry(source, node, f"{func.id}(...) from os"))
    return found


def context_vars(source: Source) -> list[str]:
    """(c) ``contextvars`` imported or ``ContextVar`` named: a channel between layers that no
    signature shows."""
    found = []
    for node in source.nodes:
        if isinstance(node, ast.Import) and any(alias.name == "contextvars" for alias in node.names):
            found.append(entry(source, node, "import contextvars"))
        elif isinstance(node, ast.ImportFrom) and node.module == "contextvars":
            found.append(entry(source, node, f"from contextvars import {', '.join(a.name for a in node.names)}"))
        elif isinstance(node, ast.Name) and node.id == "ContextVar":
            found.append(entry(source, node, "ContextVar used"))
        elif isinstance(node, ast.Attribute) and node.attr == "ContextVar":
            found.append(entry(source, node, "contextvars.ContextVar used"))
    return sorted(set(found), key=_by_line)


# The objects through which code can reach the run's strategy object. A plain settings value
# that happens to have a ``strategy`` field (the name a user passed) is not one of them.
RUN_OBJECTS = {"self", "trainer", "runtime", "_trainer", "_runtime", "pl_module", "module"}


def _reaches_run_object(value: ast.expr) -> bool:
    """``trainer.strategy``, ``self.trainer.strategy``, ``self.runtime.strategy``, ``runtime.strategy``..."""
    if isinstance(value, ast.Name):
        return value.id in RUN_OBJECTS
    if isinstance(value, ast.Attribute):
        return value.attr in RUN_OBJECTS or _reaches_run_object(value.value)
    return isinstance(value, ast.Call)  # get_trainer().strategy: assume the worst


def strategy_reach(source: Source, *, allowed_property_class: str | None = None) -> list[str]:
    """(d) On the Trainer side: any attribute named ``strategy`` (``trainer.strategy.reduce``,
    ``self.strategy = ...``), ``getattr(x, "strategy")``, or an import from
    ``trainmesh.strategies`` other than its step value types. ``allowed_property_class`` names
    the class whose ``@property def strategy`` may touch it (Trainer's, handed to users)."""
    exempt: set[int] = set()
    for cls in source.nodes:
        if isinstance(cls, ast.ClassDef) and cls.name == allowed_property_class:
            for item in cls.body:
                if (
                    isinstance(item, ast.FunctionDef)
                    and item.name == "strategy"
                    and any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
                ):
                    exempt |= {id(node) for node in ast.walk(item)}
    found = []
    for node in source.nodes:
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Attribute) and node.attr == "strategy" and _reaches_run_object(node.value):
            found.append(entry(source, node, f"attribute .strategy ({ast.unparse(node)})"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "strategy"
        ):
            found.append(entry(source, node, f"{node.func.id}(..., 'strategy')"))
    for statement in imports(source):
        if not within(statement.module, ["trainmesh.strategies"]):
            continue
        step_types = statement.module == STEP_TYPES_MODULE or (
            statement.module == "trainmesh.strategies" and statement.names == ("step",)
        )
        if step_types:
            continue
        names = ", ".join(statement.names)
        what = f"from {statement.module} import {names}" if names else f"import {statement.module}"
        found.append(entry(source, statement.line, what))
    return sorted(set(found), key=_by_line)


def _names_a_strategy(node: ast.expr) -> bool:
    """``runtime.strategy.name``, ``self.strategy.name``, ``strategy.name``, ``runtime.strategy_name``,
    ``strategy_name``, ``strategy``: an expression that is (or names) the run's strategy's name."""
    if isinstance(node, ast.Name):  # ``strategy = runtime.strategy_name`` read once, then compared
        return node.id in ("strategy_name", "strategy")
    if not isinstance(node, ast.Attribute):
        return False
    if node.attr == "strategy_name":
        return True
    owner = node.value
    named_strategy = (isinstance(owner, ast.Attribute) and owner.attr == "strategy") or (
        isinstance(owner, ast.Name) and owner.id == "strategy"
    )
    return node.attr == "name" and named_strategy


def _string_literals(node: ast.expr, tables: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_string_literals(item, set()) for item in node.elts)
    return isinstance(node, ast.Name) and node.id in tables


def strategy_name_comparisons(source: Source) -> list[str]:
    """(i) Outside ``strategies/``: a strategy's name compared with a string literal, a collection of
    them, or a module-level table of them (``runtime.strategy.name == "zero1"``, ``strategy_name not
    in _TESTED_STRATEGIES``). What differs between strategies is a field of their capabilities."""
    tables = set()
    for node in source.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _string_literals(node.value, set()) and not isinstance(node.value, ast.Constant):
                tables |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in source.nodes:
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_names_a_strategy(side) for side in sides) and any(_string_literals(side, tables) for side in sides):
            found.append(entry(source, node, f"strategy name compared: {ast.unparse(node)}"))
    return found


def lightning1_imports(source: Source, modules: dict[str, bool]) -> list[str]:
    """(j) An import of Lightning 1.x's package (``trainer/lightning1/``) from outside it, other than
    from its doors (the runner choice, the hook dispatcher, the Trainer's construction)."""
    if within(source.module, (LIGHTNING1, *LIGHTNING1_DOORS)):
        return []
    found = []
    for statement in imports(source):
        if any(within(target, (LIGHTNING1,)) for target in {statement.module, *import_targets(statement, modules)}):
            found.append(
                entry(source, statement.line, f"imports {statement.module} (enter through {LIGHTNING1_DOORS})")
            )
    return found


def lightning1_door_scope(source: Source, modules: dict[str, bool]) -> list[str]:
    """(j') A door importing a module of Lightning 1.x's package outside its scope (``LIGHTNING1_DOOR_SCOPES``)."""
    scope = LIGHTNING1_DOOR_SCOPES.get(source.module)
    if scope is None:
        return []
    found = []
    for statement in imports(source):
        for target in import_targets(statement, modules) or [statement.module]:
            if within(target, (LIGHTNING1,)) and target != LIGHTNING1 and not within(target, scope):
                found.append(entry(source, statement.line, f"imports {target} (its door's scope: {scope})"))
    return found


def _enclosing_functions(tree: ast.AST) -> dict[int, str]:
    """id(node) -> the name of the innermost function around it."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            names[id(child)] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return names


def global_step_writes(source: Source) -> list[tuple[str, str]]:
    """(k) Every assignment to an attribute ``global_step`` (``=``, ``+=``, in a tuple), as
    (entry, the function it is in)."""
    functions = _enclosing_functions(source.tree)
    found = []
    for node in source.nodes:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        flat = [t for target in targets for t in ast.walk(target)]
        if any(isinstance(t, ast.Attribute) and t.attr == "global_step" for t in flat):
            found.append((entry(source, node, f"global_step written: {ast.unparse(node)}"), functions[id(node)]))
    return found


# The names under which code holds a Runtime (``runtime``, ``self.runtime``, ``ctx.runtime``, the class).
RUNTIME_HOLDERS = {"runtime", "_runtime", "Runtime"}


def runtime_private_reach(source: Source) -> list[str]:
    """(m) ``runtime._x``, ``self.runtime._x``, ``Runtime._x``: a Runtime's underscore member
    reached from outside its own modules (what the Trainer needs is on ``runtime.trainer_port``,
    checkpoints on ``runtime.checkpoints``). Dunder names (``__class__``) are not members of its own."""
    found = []
    for node in source.nodes:
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        holder = node.value
        name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
        if name in RUNTIME_HOLDERS:
            found.append(entry(source, node, f"a Runtime's private member reached ({ast.unparse(node)})"))
    return found


def user_object_writes(source: Source) -> list[str]:
    """(l) A write onto a user's module or callback (``x`` one of the names the Trainer side holds them
    by, ``USER_OBJECTS``): ``setattr(x, name, ...)``, ``delattr(x, name)`` or ``object.__setattr__(x, name,
    ...)`` with any name but a private literal (the Module's own state, ``_toggled``, written by its
    ``toggle_optimizer``), and ``vars(x)[...] = ...`` / ``x.__dict__[...] = ...``."""
    return [found for found, _ in user_object_writes_in(source)]


def user_object_writes_in(
    source: Source, holders: Collection[str] = USER_OBJECTS
) -> list[tuple[str, tuple[str, str, str]]]:
    """``user_object_writes``'s entries, each with (module, the function it is in, the call as written);
    ``holders``: the names the code holds a user's object by (a submodule of one, ``x.get_submodule(...)``,
    counts as one)."""
    functions = _enclosing_functions(source.tree)
    found = []
    for node in source.nodes:
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            func, target, name = node.func, node.args[0], node.args[1]
            is_setattr = (isinstance(func, ast.Name) and func.id in ("setattr", "delattr")) or (
                isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
            )
            private = isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith("_")
            if is_setattr and _is_user_object(target, holders) and not private:
                what = (source.module, functions[id(node)], ast.unparse(node))
                found.append((entry(source, node, f"writes onto a user's object: {ast.unparse(node)}"), what))
        elif isinstance(node, ast.Assign):
            for written in node.targets:
                if isinstance(written, ast.Subscript) and _is_instance_dict(written.value):
                    what = (source.module, functions[id(node)], ast.unparse(written))
                    found.append((entry(source, node, f"writes onto a user's object: {ast.unparse(written)}"), what))
    return found


def _is_user_object(node: ast.AST, holders: Collection[str] = USER_OBJECTS) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_submodule":
        return _is_user_object(node.func.value, holders)
    return isinstance(node, ast.Name) and node.id in holders


def _is_instance_dict(node: ast.AST) -> bool:
    """``vars(x)`` or ``x.__dict__`` of a user's object."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return _is_user_object(node.value)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "vars"
        and len(node.args) == 1
        and _is_user_object(node.args[0])
    )


def one_door(source: Source) -> list[str]:
    """(h) On the Trainer side: an import from ``torch.distributed``, the launchers, the
    strategies, checkpoint/'s internals or the supervision service, other than the value types
    and public names of ``THROUGH_THE_DOOR`` (``from torch import distributed`` and
    ``from trainmesh.checkpoint import io`` count as imports of those modules); and
    ``torch.distributed`` reached as an attribute of ``import torch``."""
    found = []
    for statement in imports(source):
        names = statement.names or ("",)
        for name in names:
            target = f"{statement.module}.{name}" if name else statement.module
            if name and not within(statement.module, OUTSIDE_THE_DOOR) and not within(target, OUTSIDE_THE_DOOR):
                continue
            if not name and not within(target, OUTSIDE_THE_DOOR):
                continue
            if name and name in THROUGH_THE_DOOR.get(statement.module, ()):
                continue
            what = f"from {statement.module} import {name}" if name else f"import {statement.module}"
            found.append(entry(source, statement.line, what))
    # ``import torch`` then ``torch.distributed.barrier()``: the door passed by attribute, no import of it.
    for node in source.nodes:
        if isinstance(node, ast.Attribute) and node.attr == "distributed":
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                found.append(entry(source, node, "torch.distributed (an attribute of torch)"))
    return sorted(set(found), key=_by_line)


def upward_imports(
    source: Source,
    modules: dict[str, bool],
    reexports: dict[str, dict[str, str]],
    higher: tuple[str, ...] = HIGHER_LAYERS,
) -> list[str]:
    """(e) A lower-layer module importing a ``higher`` layer, by module or through a package's
    re-export (``from trainmesh import Trainer`` is ``trainmesh.trainer.trainer``)."""
    found = []
    for statement in imports(source):
        loaded = {statement.module, *import_targets(statement, modules)}
        for name in statement.names:
            loaded.add(reexports.get(statement.module, {}).get(name, statement.module))
        upward = sorted(target for target in loaded if within(target, higher))
        if upward:
            found.append(entry(source, statement.line, f"imports {', '.join(upward)}"))
    return found


def package_reexports(source: Source) -> dict[str, str]:
    """name -> the module it comes from, for the ``from m import name`` lines of an ``__init__``."""
    names = {}
    for node in source.tree.body:
        if isinstance(node, ast.ImportFrom):
            module = _absolute(source, node)
            for alias in node.names:
                names[alias.asname or alias.name] = module
    return names


def import_edges(all_sources: Iterable[Source]) -> dict[tuple[str, str], str]:
    """(f) The module graph: (importer, imported) -> where, for every import statement, a
    package's ``__init__`` included both ways: importing a package runs its ``__init__``, and
    that imports its submodules, so a circle through an ``__init__`` is a circle (``memory_estimate``
    -> ``strategies/__init__`` -> ``strategies/auto`` -> ``memory_estimate`` was one)."""
    all_sources = list(all_sources)
    modules = {source.module: source.is_package for source in all_sources}
    edges: dict[tuple[str, str], str] = {}
    for source in all_sources:
        for statement in imports(source):
            for target in import_targets(statement, modules):
                if target in modules and target != source.module:
                    edges.setdefault((source.module, target), f"{source.path}:{statement.line}")
    return edges


def import_cycles(edges: dict[tuple[str, str], str]) -> list[str]:
    """One cycle per strongly connected component of the graph, as its edges with file:line."""
    graph: dict[str, list[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, []).append(imported)
        graph.setdefault(imported, [])
    found = []
    for component in _strongly_connected(graph):
        if len(component) < 2:
            continue
        cycle = _cycle_within(graph, set(component))
        hops = [f"{edges[(a, b)]}: {a} -> {b}" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        found.append("cycle " + " -> ".join([*cycle, cycle[0]]) + "\n      " + "\n      ".join(hops))
    return found


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    # Tarjan's algorithm, iterative so that a long chain cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _cycle_within(graph: dict[str, list[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first node (breadth-first back to it)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in component:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return path[::-1]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in the strongly connected component {sorted(component)}")


def long_file(source: Source) -> list[str]:
    """(g) A file of ``MAX_FILE_LINES`` lines or more."""
    lines = len(source.text.splitlines())
    return [entry(source, 1, f"{lines} lines")] if lines >= MAX_FILE_LINES else []


def function_lengths(source: Source) -> list[tuple[str, int]]:
    """Every function and method (nested ones too) with the length of its body: from its first
    statement after the docstring to its end. The signature is not counted: ``ruff format`` puts
    each parameter of a long one on its own line, and a documented constructor of 40 arguments
    (Lightning's Trainer) is not a long function."""
    return [(entry(source, node, node.name), node.end_lineno - _body_start(node) + 1) for node in _functions(source)]


def _functions(source: Source) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in source.nodes if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _body_start(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    docstring = (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    )
    return node.body[1].lineno if docstring and len(node.body) > 1 else first.lineno


def long_functions() -> list[tuple[str, int]]:
    found = [
        (where, length)
        for source in sources()
        for where, length in function_lengths(source)
        if length > MAX_FUNCTION_LINES
    ]
    return sorted(found, key=lambda item: -item[1])


def _by_line(item: str) -> tuple[str, int]:
    path, line, _ = item.split(":", 2)
    return path, int(line)


# ---- the rules on the current source -------------------------------------------------------------
def _report(entries: list[str], rule: str) -> str:
    return f"{rule}; {len(entries)} offending:\n  " + "\n  ".join(entries)


def test_no_strategy_delegates_with_getattr() -> None:
    found = [e for s in sources() if within(s.module, ["trainmesh.strategies"]) for e in getattr_delegation(s)]
    assert not found, _report(found, "a strategy forwards attributes to another (DESIGN: no __getattr__ delegation)")


def test_no_optimizer_wrapper_forwards_attributes_with_getattr() -> None:
    # The optimizers and schedulers the loop and the Runtime hand out are subclasses of the user's class
    # sharing its __dict__, as Lightning's LightningOptimizer (utilities/wrapped_objects.py): nothing on
    # the trainer side or in the Runtime forwards what it lacks (self-test: test_checker_reports_a_violation).
    found = [e for s in sources() if within(s.module, [*TRAINER_SIDE, *RUNTIME_MODULES]) for e in getattr_delegation(s)]
    assert not found, _report(found, "a wrapper forwards attributes to a user's object (share its __dict__ instead)")


def test_only_launchers_write_the_environment() -> None:
    found = [e for s in sources() if not within(s.module, ["trainmesh.launchers"]) for e in environment_writes(s)]
    assert not found, _report(
        found, "the environment is written outside launchers/ (DESIGN: no environment side channel)"
    )


def test_no_context_vars() -> None:
    found = [e for s in sources() for e in context_vars(s)]
    assert not found, _report(found, "a ContextVar carries state between layers (DESIGN: pass it explicitly)")


def test_no_untyped_trainer_parameters() -> None:
    """Code that receives the trainer types it (``TrainerView``, or the Trainer): a ``trainer: Any``
    hides what is read from it, which the trainer-side redesign made explicit."""
    found = [
        f"{source.path}:{number}: {line.strip()}"
        for source in sources()
        for number, line in enumerate(source.text.splitlines(), start=1)
        if "trainer: Any" in line
    ]
    assert not found, _report(found, "a trainer parameter typed Any (use trainmesh.trainer_view.TrainerView)")


def test_trainer_side_talks_only_to_the_runtime() -> None:
    found = []
    for source in sources():
        if within(source.module, TRAINER_SIDE):
            owner = "Trainer" if source.module == "trainmesh.trainer.trainer" else None
            found += strategy_reach(source, allowed_property_class=owner)
    assert not found, _report(found, "the Trainer side reaches a strategy (DESIGN: it talks only to the Runtime)")


def test_trainer_side_has_one_door() -> None:
    found = [e for s in sources() if within(s.module, TRAINER_SIDE) for e in one_door(s)]
    assert not found, _report(
        found,
        "the Trainer side goes around the Runtime (DESIGN: one door; allowed: "
        "THROUGH_THE_DOOR in tests/test_architecture.py)",
    )


def test_no_strategy_name_is_compared_outside_the_strategies() -> None:
    found = [
        e for s in sources() if not within(s.module, ["trainmesh.strategies"]) for e in strategy_name_comparisons(s)
    ]
    assert not found, _report(found, "a strategy's name compared with a literal (read its capabilities instead)")


def test_only_the_runner_choice_and_the_dispatcher_enter_lightning1() -> None:
    modules = known_modules()
    found = [e for s in sources() for e in lightning1_imports(s, modules)]
    assert not found, _report(found, "Lightning 1.x's package entered other than through its doors")


def test_each_lightning1_door_imports_only_its_part() -> None:
    modules = known_modules()
    found = [e for s in sources() for e in lightning1_door_scope(s, modules)]
    assert not found, _report(found, "a door to Lightning 1.x's package imports another door's part")


def test_global_step_is_written_in_one_place_and_by_the_restores() -> None:
    found = [
        where
        for s in sources()
        for where, function in global_step_writes(s)
        if (s.module, function) not in GLOBAL_STEP_WRITERS
    ]
    assert not found, _report(found, "global_step written outside count_optimizer_steps and the restores")


def test_no_runtime_private_member_is_reached_from_outside_its_modules() -> None:
    found = [e for s in sources() if not within(s.module, RUNTIME_MODULES) for e in runtime_private_reach(s)]
    assert not found, _report(
        found,
        "a Runtime's underscore member used outside its modules (use runtime.trainer_port or runtime.checkpoints)",
    )


def test_nothing_is_written_onto_a_user_s_module_or_callback() -> None:
    # Lightning 1.x's signatures and hooks taking fewer arguments are called with arguments built at the
    # call site from the hook's signature (trainer/hook_arguments.py, trainer/lightning1/): never rebound.
    found = [e for s in sources() if within(s.module, TRAINER_SIDE) for e in user_object_writes(s)]
    assert not found, _report(
        found, "a trainer-side file writes onto a user's module or callback (build the arguments at the call site)"
    )


# The one write onto a user's module that a strategy makes (docs/architecture.md, "The pipeline cut"):
# the pipeline's cut leaves on each rank only its stages' parts of the model it was given, in place, so
# that the parts other ranks train are freed here (the model may be the user's full-size one).
# Tensor parallelism's re-tie (strategies/tied.py) sets a parameter the plan replaced back onto each module
# that shared it, as torch's parallelize_module itself registers the parameters it replaces: placement.
STRATEGY_WRITES_ONTO_THE_MODEL = {
    ("trainmesh.strategies.pipeline_cut", "keep_only", "setattr(module, name, None)"),
    ("trainmesh.strategies.tied", "retie_after_tp", "setattr(module.get_submodule(owner), attribute, first)"),
}
# The names a strategy holds a user's module (or the module it unwrapped from torch.compile) by.
STRATEGY_HOLDERS = USER_OBJECTS | {"inner", "root", "stage", "view", "child", "holder"}


def test_no_strategy_writes_onto_a_user_s_module_but_the_pipeline_cut() -> None:
    # A strategy keeps what it knows of a module in its own records (strategies/compile.py's record of
    # the user's torch.compile settings), never as an attribute on the module.
    found = [
        e
        for s in sources()
        if within(s.module, ["trainmesh.strategies"])
        for e, what in user_object_writes_in(s, STRATEGY_HOLDERS)
        if what not in STRATEGY_WRITES_ONTO_THE_MODEL
    ]
    assert not found, _report(found, "a strategy writes onto a user's module (keep the state in the strategy)")
    exempted = {what for s in sources() for _, what in user_object_writes_in(s, STRATEGY_HOLDERS)}
    assert exempted >= STRATEGY_WRITES_ONTO_THE_MODEL  # each exemption names a line that is there


def test_lower_layers_never_import_higher_ones() -> None:
    modules = known_modules()
    reexports = {s.module: package_reexports(s) for s in sources() if s.is_package}
    found = [e for s in sources() if within(s.module, LOWER_LAYERS) for e in upward_imports(s, modules, reexports)]
    assert not found, _report(found, f"a lower layer ({', '.join(LOWER_LAYERS)}) imports a higher one")


def test_the_runtime_and_the_scaling_tools_never_import_the_layers_above() -> None:
    modules = known_modules()
    reexports = {s.module: package_reexports(s) for s in sources() if s.is_package}
    found = [
        e
        for layer, higher in MIDDLE_LAYERS.items()
        for s in sources()
        if within(s.module, (layer,))
        for e in upward_imports(s, modules, reexports, higher)
    ]
    assert not found, _report(found, "the Runtime or the scaling tools import a layer above them")


def test_the_module_and_the_callbacks_never_import_the_trainer() -> None:
    modules = known_modules()
    reexports = {s.module: package_reexports(s) for s in sources() if s.is_package}
    found = [
        e
        for user, above in TRAINER_USERS.items()
        for s in sources()
        if within(s.module, (user,))
        for e in upward_imports(s, modules, reexports, above)
    ]
    assert not found, _report(found, "the Module or a callback imports the Trainer side (use TrainerView)")


def test_no_import_cycles() -> None:
    found = import_cycles(import_edges(sources()))
    assert not found, _report(found, "trainmesh modules import each other in a cycle")


def test_files_are_short() -> None:
    found = [e for s in sources() for e in long_file(s)]
    assert not found, _report(found, f"files of {MAX_FILE_LINES} lines or more")


def test_functions_are_short() -> None:
    found = [f"{where}: {length} lines" for where, length in long_functions()]
    assert not found, _report(found, f"functions over {MAX_FUNCTION_LINES} lines")


def near_the_cap(source: Source) -> list[str]:
    """(n) A file or a function within ``MARGIN`` of its cap (and not over it, which the rules
    above report): 475 lines or more, a body of 57 lines or more."""
    files, functions = MAX_FILE_LINES * (1 - MARGIN), MAX_FUNCTION_LINES * (1 - MARGIN)
    lines = len(source.text.splitlines())
    found = [entry(source, 1, f"{lines} lines") for _ in [0] if files <= lines < MAX_FILE_LINES]
    return found + [
        f"{where}: {n} lines" for where, n in function_lengths(source) if functions <= n <= MAX_FUNCTION_LINES
    ]


def test_nothing_is_within_5_percent_of_its_cap() -> None:
    found = [e for s in sources() for e in near_the_cap(s)]
    assert not found, _report(found, f"a file or function within {MARGIN:.0%} of its cap (redesign, do not squeeze)")


def test_the_checks_see_the_whole_package() -> None:
    # An empty or misplaced source tree would make every rule above pass vacuously.
    modules = known_modules()
    assert {"trainmesh", "trainmesh.runtime", "trainmesh.trainer.trainer", "trainmesh.strategies"} <= set(modules)


# ---- the checkers catch what they claim to --------------------------------------------------------
VIOLATIONS = [
    (
        getattr_delegation,
        "class S:\n    def __getattr__(self, name):\n        return getattr(self._root, name)\n",
        "snippet.py:2: class S defines __getattr__",
    ),
    (getattr_delegation, "class S:\n    class Inner:\n        __getattr__ = forward\n", "snippet.py:3: class Inner"),
    (environment_writes, "import os\nos.environ['A'] = '1'\n", "snippet.py:2: os.environ[...] = ..."),
    (
        environment_writes,
        "import os\ndef f():\n    os.environ.setdefault('A', '1')\n",
        "snippet.py:3: os.environ.setdefault",
    ),
    (environment_writes, "import os\nos.environ.update({'A': '1'})\n", "snippet.py:2: os.environ.update"),
    (environment_writes, "import os\nos.putenv('A', '1')\n", "snippet.py:2: os.putenv"),
    (environment_writes, "import os\ndel os.environ['A']\n", "snippet.py:2: del os.environ[...]"),
    (environment_writes, "import os\nos.environ.pop('A', None)\n", "snippet.py:2: os.environ.pop"),
    (environment_writes, "import os as _os\n_os.environ['A'] += 'x'\n", "snippet.py:2: os.environ[...] = ..."),
    (environment_writes, "from os import environ as env\nenv['A'] = '1'\n", "snippet.py:2: os.environ[...] = ..."),
    (
        context_vars,
        "from contextvars import ContextVar\nv = ContextVar('v')\n",
        "snippet.py:1: from contextvars import ContextVar",
    ),
    (
        context_vars,
        "import contextvars\nv = contextvars.ContextVar('v')\n",
        "snippet.py:2: contextvars.ContextVar used",
    ),
    (strategy_reach, "def f(trainer):\n    return trainer.strategy.reduce(1)\n", "snippet.py:2: attribute .strategy"),
    (
        strategy_reach,
        "class T:\n    def __init__(self, r):\n        self.strategy = r\n",
        "snippet.py:3: attribute .strategy",
    ),
    (strategy_reach, "def f(r):\n    return getattr(r, 'strategy')\n", "snippet.py:2: getattr(..., 'strategy')"),
    (
        strategy_reach,
        "def f():\n    from trainmesh.strategies.dp import DataParallelStrategy\n",
        "snippet.py:2: from trainmesh.strategies.dp import DataParallelStrategy",
    ),
    (
        strategy_reach,
        "from trainmesh.strategies import build_strategy\n",
        "snippet.py:1: from trainmesh.strategies import",
    ),
    (strategy_reach, "import trainmesh.strategies.ddp\n", "snippet.py:1: import trainmesh.strategies.ddp"),
    (strategy_reach, "from ..strategies.dp import X\n", "snippet.py:1: from trainmesh.strategies.dp import X"),
    (
        strategy_name_comparisons,
        "def f(runtime):\n    if runtime.strategy.name == 'zero1':\n        pass\n",
        "snippet.py:2: strategy name compared",
    ),
    (
        strategy_name_comparisons,
        "_TESTED = ('single', 'ddp')\ndef f(ctx):\n    return ctx.runtime.strategy_name not in _TESTED\n",
        "snippet.py:3: strategy name compared",
    ),
    (
        strategy_name_comparisons,
        "def f(ctx):\n    strategy = ctx.runtime.strategy_name\n    return strategy in ('dp', 'ddp2')\n",
        "snippet.py:3: strategy name compared",
    ),
    (strategy_name_comparisons, "ok = self.strategy.name != 'fsdp'\n", "snippet.py:1: strategy name compared"),
    (runtime_private_reach, "def f(runtime):\n    runtime._placed = None\n", "snippet.py:2: a Runtime's private"),
    (
        runtime_private_reach,
        "def f(ctx):\n    return ctx.runtime._collect_predictions([])\n",
        "snippet.py:2: a Runtime's private member reached (ctx.runtime._collect_predictions)",
    ),
    (runtime_private_reach, "class T:\n    def f(self):\n        self.runtime._uncompiled(1)\n", "snippet.py:3:"),
    (runtime_private_reach, "x = Runtime._choose_strategy\n", "snippet.py:1: a Runtime's private"),
    (one_door, "import torch.distributed as dist\n", "snippet.py:1: import torch.distributed"),
    (one_door, "from torch import distributed\n", "snippet.py:1: from torch import distributed"),
    (
        one_door,
        "import torch\ndef f():\n    torch.distributed.barrier()\n",
        "snippet.py:3: torch.distributed (an attribute of torch)",
    ),
    (
        one_door,
        "def f():\n    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler\n",
        "snippet.py:2: from torch.distributed.elastic.multiprocessing.errors import ErrorHandler",
    ),
    (
        one_door,
        "from trainmesh.launchers.environments import restart_reason\n",
        "snippet.py:1: from trainmesh.launchers.environments import restart_reason",
    ),
    (
        one_door,
        "from trainmesh.launchers import exit_status\n",
        "snippet.py:1: from trainmesh.launchers import exit_status",
    ),
    (
        one_door,
        "from trainmesh.checkpoint.io import remove_checkpoint\n",
        "snippet.py:1: from trainmesh.checkpoint.io import remove_checkpoint",
    ),
    (one_door, "from trainmesh.checkpoint import io\n", "snippet.py:1: from trainmesh.checkpoint import io"),
    (one_door, "from trainmesh import strategies\n", "snippet.py:1: from trainmesh import strategies"),
    (
        one_door,
        "from ..supervision.watchdog import StepWatchdog\n",
        "snippet.py:1: from trainmesh.supervision.watchdog import StepWatchdog",
    ),
    (
        one_door,
        "from trainmesh.supervision import Supervision\n",
        "snippet.py:1: from trainmesh.supervision import Supervision",
    ),
    (
        one_door,
        "from trainmesh.strategies.step import StepHooks, run_train_step\n",
        "snippet.py:1: from trainmesh.strategies.step import run_train_step",
    ),
]


@pytest.mark.parametrize(
    ("checker", "text", "expected"),
    VIOLATIONS,
    ids=[f"{checker.__name__}-{i}" for i, (checker, _, _) in enumerate(VIOLATIONS)],
)
def test_checker_reports_a_violation(checker, text: str, expected: str) -> None:
    found = checker(parse(text, module="trainmesh.trainer.snippet"))
    assert any(e.startswith(expected) for e in found), found


CLEAN = [
    (
        getattr_delegation,
        "class S:\n    def __getitem__(self, key):\n        return 1\ndef __getattr__(name):\n    return 1\n",
    ),
    (
        environment_writes,
        "import os\nx = os.environ.get('A')\ny = os.environ['A']\nenv = dict(os.environ)\nenv['A'] = '1'\n"
        "env.update(B='2')\nsubprocess.run([], env={**os.environ, 'A': '1'})\n",
    ),
    (context_vars, "import contextlib\nx = contextlib.nullcontext()\n"),
    (
        runtime_private_reach,
        "def f(runtime, trainer):\n    runtime.trainer_port.uncompiled(1)\n    runtime.checkpoints.saves.finish()\n"
        "    trainer._state = runtime.__class__\n    self._runtime = runtime\n",
    ),
    (
        strategy_name_comparisons,
        "def f(runtime, name):\n    if runtime.capabilities.keras_fit and name == 'fit':\n        pass\n"
        "    message = f'not under {runtime.strategy_name!r}'\n    same = runtime.strategy.name == other.name\n",
    ),
    (
        strategy_reach,
        "from trainmesh.strategies.step import StepResult\nfrom trainmesh.strategies import step\n"
        "r = Runtime(strategy='dp')\nname = trainer.strategy_name\n",
    ),
    (
        one_door,
        "import torch\nfrom torch import nn\nfrom trainmesh.strategies.step import StepHooks, tokens_in\n"
        "from trainmesh.checkpoint import CheckpointPlaces, resolve_checkpoint\n"
        "from trainmesh.supervision import Preempted\nfrom trainmesh.runtime import Runtime\n"
        "from ..utilities.rank_zero import rank_zero_warn\nimport torch.nn.functional as F\n",
    ),
]


@pytest.mark.parametrize(("checker", "text"), CLEAN, ids=[c.__name__ for c, _ in CLEAN])
def test_checker_passes_clean_code(checker, text: str) -> None:
    assert checker(parse(text, module="trainmesh.trainer.snippet")) == []


def test_strategy_reach_allows_only_the_trainer_strategy_property() -> None:
    text = (
        "class Trainer:\n"
        "    @property\n"
        "    def strategy(self):\n"
        "        return self.runtime.strategy\n"
        "    def fit(self):\n"
        "        self.strategy.barrier()\n"
        "class Other:\n"
        "    @property\n"
        "    def strategy(self):\n"
        "        return self.runtime.strategy\n"
    )
    found = strategy_reach(parse(text), allowed_property_class="Trainer")
    assert [e.split(": ")[0] for e in found] == ["snippet.py:6", "snippet.py:10"], found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("from trainmesh.trainer.trainer import Trainer\n", "imports trainmesh.trainer.trainer"),
        ("def f():\n    import trainmesh.runtime\n", "snippet.py:2: imports trainmesh.runtime"),
        ("from trainmesh import Trainer\n", "imports trainmesh.trainer.trainer"),  # through the package's re-export
        ("from trainmesh import module\n", "imports trainmesh.module"),
        (
            "from ...callbacks import Callback\n",
            "imports trainmesh.callbacks",
        ),  # relative, from trainmesh.utilities.x.y
    ],
)
def test_upward_imports_are_found(text: str, expected: str) -> None:
    modules = {
        "trainmesh": True,
        "trainmesh.module": False,
        "trainmesh.trainer": True,
        "trainmesh.trainer.trainer": False,
        "trainmesh.runtime": False,
        "trainmesh.callbacks": True,
    }
    reexports = {"trainmesh": {"Trainer": "trainmesh.trainer.trainer"}}
    found = upward_imports(parse(text, module="trainmesh.utilities.x.y"), modules, reexports)
    assert len(found) == 1 and expected in found[0], found
    assert upward_imports(parse("from trainmesh.seed import seed_everything\nimport torch\n"), modules, reexports) == []


@pytest.mark.parametrize(
    ("layer", "text", "expected"),
    [
        ("trainmesh.runtime", "def f():\n    from trainmesh.module import built\n", "imports trainmesh.module"),
        ("trainmesh.scaling.x", "def f():\n    from trainmesh.cli.classes import c\n", "imports trainmesh.cli.classes"),
    ],
)
def test_the_middle_layers_upward_imports_are_found(layer: str, text: str, expected: str) -> None:
    modules = {"trainmesh.module": False, "trainmesh.cli": True, "trainmesh.cli.classes": False}
    higher = next(h for name, h in MIDDLE_LAYERS.items() if within(layer, (name,)))
    found = upward_imports(parse(text, module=layer), modules, {}, higher)
    assert len(found) == 1 and expected in found[0], found
    assert upward_imports(parse("from trainmesh.runtime import Runtime\n", module=layer), modules, {}, higher) == []


@pytest.mark.parametrize(
    ("user", "text", "expected"),
    [
        (
            "trainmesh.module",
            "def f():\n    from trainmesh.trainer import manual_optimization\n",
            "snippet.py:2: imports",
        ),
        ("trainmesh.module", "def f():\n    import trainmesh.trainer.trainer\n", "imports trainmesh.trainer.trainer"),
        ("trainmesh.callbacks.x", "def f():\n    from trainmesh.module import Module\n", "imports trainmesh.module"),
        ("trainmesh.callbacks.x", "def f():\n    from trainmesh import Trainer\n", "imports trainmesh.trainer.trainer"),
        ("trainmesh.callbacks.x", "from ..trainer.hooks import HookDispatcher\n", "imports trainmesh.trainer.hooks"),
    ],
)
def test_the_trainer_users_upward_imports_are_found(user: str, text: str, expected: str) -> None:
    modules = {
        "trainmesh": True,
        "trainmesh.module": False,
        "trainmesh.trainer": True,
        "trainmesh.trainer.trainer": False,
        "trainmesh.trainer.hooks": False,
        "trainmesh.trainer.manual_optimization": False,
        "trainmesh.callbacks": True,
        "trainmesh.callbacks.x": False,
    }
    reexports = {"trainmesh": {"Trainer": "trainmesh.trainer.trainer"}}
    above = next(h for name, h in TRAINER_USERS.items() if within(user, (name,)))
    found = upward_imports(parse(text, module=user), modules, reexports, above)
    assert len(found) == 1 and expected in found[0], found
    clean = "from trainmesh.trainer_view import TrainerView\nfrom trainmesh.module_hooks import ModelHooks\n"
    assert upward_imports(parse(clean, module=user), modules, reexports, above) == []


def test_import_cycles_are_found_through_package_inits() -> None:
    files = {
        "trainmesh.a": ("from trainmesh.b import thing\n", False),
        "trainmesh.b": ("def f():\n    from trainmesh import c\n", False),  # a module of the package: an edge to it
        "trainmesh.c": ("import trainmesh.a\n", False),
        # The circle the check used to miss: a module importing a package whose __init__ imports a
        # module that imports the first one back (memory_estimate -> strategies -> auto -> memory_estimate).
        "trainmesh.d": ("def f():\n    from trainmesh.pkg import X\n", False),
        "trainmesh.pkg": ("from trainmesh.pkg.e import X\n", True),
        "trainmesh.pkg.e": ("from trainmesh.d import estimate\n", False),
    }
    snippets = [
        parse(text, module=name, path=f"{name}.py", is_package=is_package) for name, (text, is_package) in files.items()
    ]
    edges = import_edges(snippets)
    assert ("trainmesh.d", "trainmesh.pkg") in edges and ("trainmesh.pkg", "trainmesh.pkg.e") in edges
    first, second = sorted(import_cycles(edges))
    assert first.startswith("cycle trainmesh.a -> trainmesh.b -> trainmesh.c -> trainmesh.a")
    assert "trainmesh.b.py:2: trainmesh.b -> trainmesh.c" in first
    assert second.startswith("cycle trainmesh.d -> trainmesh.pkg -> trainmesh.pkg.e -> trainmesh.d"), second
    assert "trainmesh.pkg.py:1: trainmesh.pkg -> trainmesh.pkg.e" in second
    assert import_cycles({("x", "y"): "x.py:1"}) == []


def test_lightning1_imports_are_found_outside_the_doors() -> None:
    modules = {LIGHTNING1: True, f"{LIGHTNING1}.tbptt": False}
    text = "def f():\n    from trainmesh.trainer.lightning1.tbptt import split_batch\n"
    (found,) = lightning1_imports(parse(text, module="trainmesh.trainer.fit_loop"), modules)
    assert found.startswith("snippet.py:2: imports trainmesh.trainer.lightning1.tbptt"), found
    (found,) = lightning1_imports(parse("from .lightning1 import tbptt\n", module="trainmesh.trainer.x"), modules)
    assert found.startswith("snippet.py:1: imports trainmesh.trainer.lightning1"), found
    for door in LIGHTNING1_DOORS:
        assert lightning1_imports(parse(text, module=door), modules) == []


def test_a_door_importing_another_door_s_part_of_lightning1_is_found() -> None:
    modules = {LIGHTNING1: True, f"{LIGHTNING1}.legacy_hooks": False, f"{LIGHTNING1}.legacy_arguments": False}
    text = "from trainmesh.trainer.lightning1.legacy_hooks import CALLBACK_HOOKS\n"
    (found,) = lightning1_door_scope(parse(text, module="trainmesh.trainer.construction"), modules)
    assert found.startswith("snippet.py:1: imports trainmesh.trainer.lightning1.legacy_hooks"), found
    text = "from trainmesh.trainer.lightning1 import legacy_arguments\n"
    assert lightning1_door_scope(parse(text, module="trainmesh.trainer.construction"), modules) == []
    assert lightning1_door_scope(parse(text, module="trainmesh.trainer.hooks"), modules) != []


def test_global_step_writes_are_found_with_their_function() -> None:
    text = (
        "def run(state):\n    state.global_step += 1\n"
        "class W:\n    def adopt(self, state):\n        state.current_epoch, state.global_step = 1, 2\n"
        "def read(trainer):\n    return trainer.global_step + 1\n"
    )
    found = global_step_writes(parse(text))
    assert [(where.split(": ")[0], function) for where, function in found] == [
        ("snippet.py:2", "run"),
        ("snippet.py:5", "adopt"),
    ], found


def test_writes_onto_a_user_s_object_are_found() -> None:
    text = (
        "def f(module, callback, hook, wrapper):\n"
        "    object.__setattr__(module, 'training_step', wrapper)\n"
        "    setattr(callback, hook, wrapper)\n"
        "    setattr(self_state, 'x', 1)\n"
        "    object.__setattr__(self, 'x', 1)\n"
        "    object.__setattr__(module, '_toggled', 1)\n"
    )
    found = user_object_writes(parse(text))
    assert [e.split(": ")[0] for e in found] == ["snippet.py:2", "snippet.py:3"], found


def test_writes_onto_a_user_s_object_under_any_name_are_found() -> None:
    """The rule is any write onto the user's object, not only a hook's name: a name in a variable, a
    built name, the instance's dict; the Module's own private state and other objects are not."""
    text = (
        "def f(module, callback, wrapper, name, trainer):\n"
        "    setattr(pl_module, name, wrapper)\n"
        "    vars(model)['on_fit_start'] = wrapper\n"
        "    callback.__dict__[name] = wrapper\n"
        "    setattr(module, f'on_{name}', wrapper)\n"
        "    vars(trainer)['x'] = 1\n"
        "    object.__setattr__(module, '_toggled', 1)\n"
        "    setattr(instance, name, 1)\n"
    )
    found = user_object_writes(parse(text))
    assert sorted(e.split(": ")[0] for e in found) == [f"snippet.py:{line}" for line in (2, 3, 4, 5)], found


def test_writes_onto_a_user_s_module_in_a_strategy_are_found_with_their_function() -> None:
    text = (
        "def keep_only(module, parts):\n"
        "    setattr(module, name, None)\n"
        "def place(model, name):\n"
        "    delattr(model, name)\n"
        "    object.__setattr__(module, 'compiled_by_user', 1)\n"
        "    object.__delattr__(module, name)\n"
        "    setattr(inner, COMPILED_BY_USER, setting)\n"
        "    setattr(module.get_submodule(owner), attribute, first)\n"
        "    setattr(param, name, 1)\n"
    )
    found = user_object_writes_in(parse(text, module="trainmesh.strategies.x"), STRATEGY_HOLDERS)
    assert [(e.split(": ")[0], what[1]) for e, what in found] == [
        ("snippet.py:2", "keep_only"),
        ("snippet.py:4", "place"),
        ("snippet.py:5", "place"),
        ("snippet.py:6", "place"),
        ("snippet.py:7", "place"),
        ("snippet.py:8", "place"),
    ], found
    assert found[0][1] == ("trainmesh.strategies.x", "keep_only", "setattr(module, name, None)")


def test_file_and_function_lengths_are_measured() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    signature = '@decorator\ndef f(\n    a,\n    b,\n):\n    """Doc\n    string."""\n'
    source = parse(f"{signature}{body}\n" + "y = 1\n" * MAX_FILE_LINES)
    # The body only: not the decorator, the signature's 4 lines or the docstring's 2.
    assert function_lengths(source) == [("snippet.py:2: f", MAX_FUNCTION_LINES + 1)]
    assert long_file(source) == [f"snippet.py:1: {MAX_FILE_LINES + MAX_FUNCTION_LINES + 8} lines"]
    assert long_file(parse("y = 1\n" * (MAX_FILE_LINES - 1))) == []
    assert function_lengths(parse('def g():\n    """Only a docstring."""\n')) == [("snippet.py:1: g", 1)]


def test_what_is_near_a_cap_is_found() -> None:
    def body(lines: int) -> str:
        return "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(lines))

    assert near_the_cap(parse(body(57))) == ["snippet.py:1: f: 57 lines"]
    assert near_the_cap(parse(body(56))) == []
    assert near_the_cap(parse("y = 1\n" * 475)) == ["snippet.py:1: 475 lines"]
    assert near_the_cap(parse("y = 1\n" * 474)) == []


if __name__ == "__main__":
    checks = {
        "test_no_strategy_delegates_with_getattr": test_no_strategy_delegates_with_getattr,
        "test_no_optimizer_wrapper_forwards_attributes_with_getattr": (
            test_no_optimizer_wrapper_forwards_attributes_with_getattr
        ),
        "test_only_launchers_write_the_environment": test_only_launchers_write_the_environment,
        "test_no_context_vars": test_no_context_vars,
        "test_trainer_side_talks_only_to_the_runtime": test_trainer_side_talks_only_to_the_runtime,
        "test_trainer_side_has_one_door": test_trainer_side_has_one_door,
        "test_no_strategy_writes_onto_a_user_s_module_but_the_pipeline_cut": (
            test_no_strategy_writes_onto_a_user_s_module_but_the_pipeline_cut
        ),
        "test_lower_layers_never_import_higher_ones": test_lower_layers_never_import_higher_ones,
        "test_the_module_and_the_callbacks_never_import_the_trainer": (
            test_the_module_and_the_callbacks_never_import_the_trainer
        ),
        "test_no_import_cycles": test_no_import_cycles,
        "test_only_the_runner_choice_and_the_dispatcher_enter_lightning1": (
            test_only_the_runner_choice_and_the_dispatcher_enter_lightning1
        ),
        "test_global_step_is_written_in_one_place_and_by_the_restores": (
            test_global_step_is_written_in_one_place_and_by_the_restores
        ),
        "test_nothing_is_written_onto_a_user_s_module_or_callback": (
            test_nothing_is_written_onto_a_user_s_module_or_callback
        ),
        "test_no_runtime_private_member_is_reached_from_outside_its_modules": (
            test_no_runtime_private_member_is_reached_from_outside_its_modules
        ),
        "test_no_strategy_name_is_compared_outside_the_strategies": (
            test_no_strategy_name_is_compared_outside_the_strategies
        ),
        "test_files_are_short": test_files_are_short,
        "test_nothing_is_within_5_percent_of_its_cap": test_nothing_is_within_5_percent_of_its_cap,
    }
    for name, check in checks.items():
        try:
            check()
            print(f"PASS {name}")
        except AssertionError as failure:
            print(f"FAIL {name}: {failure}")
    print(f"\nfunctions longer than {MAX_FUNCTION_LINES} lines (reported, not asserted):")
    for where, length in long_functions():
        print(f"  {length:4d}  {where}")
