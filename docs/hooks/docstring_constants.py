"""Griffe extension: a class whose body says ``__doc__ = docstrings.NAME`` gets that docstring.

Four public classes live in files at the house limit of 500 lines, so their docstrings are kept in
``src/trainmesh/utilities/docstrings.py`` and assigned in the class body. mkdocstrings reads the
source without importing it (importing trainmesh would pull in every optional dependency), so it
would see no docstring; this extension reads the constant from that file, also without importing.
"""

from __future__ import annotations

import ast
import inspect
from functools import cache
from pathlib import Path
from typing import Any

import griffe

CONSTANTS = Path(__file__).resolve().parents[2] / "src" / "trainmesh" / "utilities" / "docstrings.py"


@cache
def constants() -> dict[str, str]:
    tree = ast.parse(CONSTANTS.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = inspect.cleandoc(node.value.value)
    return found


class DocstringConstants(griffe.Extension):
    def on_class_members(self, *, node: Any, cls: griffe.Class, agent: Any, **kwargs: Any) -> None:
        doc = cls.members.get("__doc__")
        value = str(getattr(doc, "value", "") or "")
        if value.startswith("docstrings."):
            text = constants().get(value.removeprefix("docstrings."))
            if text is not None:
                cls.docstring = griffe.Docstring(text, parent=cls, lineno=doc.lineno, endlineno=doc.endlineno)
