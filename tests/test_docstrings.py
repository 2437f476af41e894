"""Every public class and function of trainmesh, trainmesh.keras, trainmesh.callbacks and
trainmesh.strategies (their ``__all__``) has a docstring that says its arguments and defaults and
shows one example: what ``help(tm.Trainer)`` and the reference pages (mkdocstrings, docs/reference/)
show. The sections are Google style (``Args:``, ``Examples:``), which the reference pages render.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

from trainmesh.utilities.refusal import refusal_of

MODULES = ["trainmesh", "trainmesh.keras", "trainmesh.callbacks", "trainmesh.strategies"]


def public_objects() -> list[tuple[str, object]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj) and hasattr(obj, "__wrapped__"):
                found.append((f"{name}.{attr}", obj))
    return found


def parameters(obj: object) -> list[str]:
    """The arguments a caller passes: a class's ``__init__``'s, a function's own."""
    try:
        signature = inspect.signature(obj)  # a class: its __init__ without self
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind not in kinds and p.name != "self"]


def undocumented(qualname: str, obj: object) -> str | None:
    reason = refusal_of(obj)
    if reason is not None:  # a Lightning name refused here (TPU, DeepSpeed, ...): its docstring says why
        return None if reason in (obj.__doc__ or "") else f"{qualname}: refused, and its docstring does not say why"
    doc = inspect.getdoc(obj) if obj.__doc__ else None
    if inspect.isclass(obj) and obj.__doc__ is None:
        doc = None
    if not doc:
        return f"{qualname}: no docstring"
    if not re.search(r"^Examples?:\n", doc, re.M):
        return f"{qualname}: no 'Examples:' section"
    names = parameters(obj)
    if names:
        args = re.search(r"^Args:\n(.*?)(?:^\S|\Z)", doc, re.M | re.S)
        if not args:
            return f"{qualname}: no 'Args:' section for {names}"
        missing = [n for n in names if not re.search(rf"^\s+{re.escape(n)}\b[^\n]*:", args.group(1), re.M)]
        if missing:
            return f"{qualname}: 'Args:' does not name {missing}"
    return None


def wrong_defaults(obj: object) -> list[str]:
    """Each ``(default ``X``)`` that names a literal X other than the signature's default: a
    docstring left behind when the default changed (Trainer's precision said '32-true' after it
    became None as Lightning's). Non-literal defaults (``torch.device(...)``, enum members) are
    not compared."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    doc = inspect.getdoc(obj) or ""
    wrong = []
    for p in signature.parameters.values():
        stated = re.search(rf"^\s+{re.escape(p.name)}\b[^\n]*\(default ``(.*?)``\)\.?\s*$", doc, re.M)
        if stated is None or p.default is inspect.Parameter.empty:
            continue
        try:
            value = ast.literal_eval(stated.group(1))
        except (ValueError, SyntaxError):
            continue
        if value != p.default or type(value) is not type(p.default):
            wrong.append(f"{p.name}: the docstring says {stated.group(1)}, the signature {p.default!r}")
    return wrong


def test_the_public_names_are_found():
    names = {qualname for qualname, _ in public_objects()}
    assert {"trainmesh.Trainer", "trainmesh.keras.fit", "trainmesh.callbacks.ModelCheckpoint"} <= names
    assert "trainmesh.strategies.ModelParallelStrategy" in names and len(names) > 40


@pytest.mark.parametrize("qualname", [q for q, _ in public_objects()])
def test_every_public_name_has_a_docstring_with_its_arguments_and_an_example(qualname):
    obj = dict(public_objects())[qualname]
    assert undocumented(qualname, obj) is None, undocumented(qualname, obj)


@pytest.mark.parametrize("qualname", [q for q, _ in public_objects()])
def test_every_stated_default_is_the_signature_s(qualname):
    assert wrong_defaults(dict(public_objects())[qualname]) == []


def test_the_check_sees_what_is_missing():
    def documented(a: int, b: int = 2) -> int:
        """Add.

        Args:
            a: the first.
            b: the second (default 2).

        Examples:
            >>> documented(1)
            3
        """
        return a + b

    def half(a: int, b: int = 2) -> int:
        """Add.

        Args:
            a: the first.

        Examples:
            >>> half(1)
            3
        """
        return a + b

    assert undocumented("documented", documented) is None
    assert wrong_defaults(documented) == []

    def stale(a: int = 2, b: str | None = None, c: float = 1e-8) -> None:
        """Nothing.

        Args:
            a: the first (default ``2``).
            b: the second (default ``'32-true'``).
            c: the third (default ``1e-8``).
        """

    assert wrong_defaults(stale) == ["b: the docstring says '32-true', the signature None"]
    assert "does not name ['b']" in undocumented("half", half)
    assert "no docstring" in undocumented("lambda", lambda: None)


def test_the_reference_pages_read_the_docstrings_kept_in_utilities_docstrings():
    # Four classes set __doc__ from trainmesh/utilities/docstrings.py (their files are at the line
    # limit); mkdocstrings reads source without importing it, through docs/hooks/docstring_constants.py.
    griffe = pytest.importorskip("griffe")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    extension = griffe.load_extensions(f"{root / 'docs' / 'hooks' / 'docstring_constants.py'}:DocstringConstants")
    package = griffe.load("trainmesh", search_paths=[str(root / "src")], extensions=extension)
    import trainmesh
    import trainmesh.callbacks
    import trainmesh.strategies

    for path, cls in [
        ("trainer.trainer.Trainer", trainmesh.Trainer),
        ("runtime.Runtime", trainmesh.Runtime),
        ("callbacks.model_checkpoint.ModelCheckpoint", trainmesh.callbacks.ModelCheckpoint),
        ("strategies.model_parallel.ModelParallelStrategy", trainmesh.strategies.ModelParallelStrategy),
    ]:
        seen = package[path].docstring
        assert seen is not None and seen.value == inspect.getdoc(cls), path
