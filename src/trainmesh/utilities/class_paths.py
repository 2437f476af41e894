"""Which model and data classes a ``trainmesh`` command runs: stage one of the command line.

The full parser needs the classes first, since their ``__init__`` arguments become its
``--model.<arg>`` / ``--data.<arg>`` options; so ``--model`` / ``--data`` (and the ``class_path``
entries of any ``--config``) are read here, before it exists, and imported. The commands that
build no Trainer (``scale``, ``project``, ``estimate``: trainmesh.scaling and the cli) read their
classes here too, so it sits below both.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "trainmesh.demo:DigitsClassifier"
DEFAULT_DATA = "trainmesh.data.digits:DigitsDataModule"

_CLASS_ROLES = ("model", "data")


class CLIError(ValueError):
    """A mistake on the command line; ``main`` prints its message without a traceback."""


def find_class_paths(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Find the ``--model`` / ``--data`` choice before the full parser exists.

    Returns ``args`` with the short ``--model X`` spelled ``--model.class_path X`` (the key the
    parser and config files use) and the chosen import paths, reading left to right so that a
    later flag or ``--config`` wins, as it does in the full parse.

    >>> args, paths = find_class_paths(["--model", "a.b:Net", "--model.hidden_dim", "3"])
    >>> args
    ['--model.class_path', 'a.b:Net', '--model.hidden_dim', '3']
    >>> paths["model"], paths["data"]
    ('a.b:Net', 'trainmesh.data.digits:DigitsDataModule')
    """
    paths = {"model": DEFAULT_MODEL, "data": DEFAULT_DATA}
    rewritten: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name, has_inline, inline = arg.partition("=")
        value = inline if has_inline else (args[index + 1] if index + 1 < len(args) else None)
        step = 1 if has_inline or value is None else 2
        role = name[2:].removesuffix(".class_path") if name.startswith("--") else ""
        if role in _CLASS_ROLES and value is not None:
            paths[role] = value
            rewritten += [f"--{role}.class_path", value]
        elif name == "--config" and value is not None:
            paths.update(_class_paths_in_config(value))
            rewritten += args[index : index + step]
        else:
            step = 1
            rewritten.append(arg)
        index += step
    return rewritten, paths


def _class_paths_in_config(source: str) -> dict[str, str]:
    import yaml

    path = Path(source)
    if path.is_file():
        text = path.read_text()
    elif "\n" in source or source.lstrip().startswith("{"):
        text = source  # an inline YAML/JSON config, as jsonargparse accepts
    else:
        raise FileNotFoundError(f"--config {source}: no such file; give the path of a YAML config file")
    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CLIError(f"--config {source} is not valid YAML: {err}") from err
    if not isinstance(content, dict):
        raise CLIError(
            f"--config {source} must hold a mapping with model/data/trainer keys; it holds {type(content).__name__}"
        )
    found: dict[str, str] = {}
    for role in _CLASS_ROLES:
        section = content.get(role)
        if isinstance(section, str):
            raise CLIError(
                f"--config {source}: '{role}: {section}' must be a mapping; write\n"
                f"  {role}:\n    class_path: {section}\n    <argument>: <value>"
            )
        if isinstance(section, dict) and isinstance(section.get("class_path"), str):
            found[role] = section["class_path"]
    return found


def import_class(path: str, role: str = "model") -> type:
    """The class that ``path`` (``package.module:ClassName`` or ``package.module.ClassName``) names.

    >>> import_class("trainmesh.demo:DigitsClassifier").__name__
    'DigitsClassifier'
    """
    module_name, attr = _split_import_path(path, role)
    module = _import_module(module_name, path, role)
    obj: Any = module
    for part in attr.split("."):  # nested classes: pkg.mod:Outer.Inner
        if not hasattr(obj, part):
            classes = {n: v for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_")}
            defined = sorted(n for n, v in classes.items() if v.__module__ == module.__name__) or sorted(classes)
            raise CLIError(
                f"--{role} {path}: module '{module_name}' has no attribute '{part}'; the classes it "
                f"has are {defined or 'none'} (expected form: package.module:ClassName)"
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise CLIError(f"--{role} {path}: '{attr}' is a {type(obj).__name__}, not a class; name a class")
    return obj


def _split_import_path(path: str, role: str) -> tuple[str, str]:
    text = path.strip()
    if ":" in text:
        module_name, _, attr = text.partition(":")
    else:
        module_name, _, attr = text.rpartition(".")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".") + attr.split(".")):
        raise CLIError(
            f"--{role} {path!r} is not an import path; expected package.module:ClassName, "
            f"e.g. --{role} {DEFAULT_MODEL if role == 'model' else DEFAULT_DATA}"
        )
    return module_name, attr


def _import_module(module_name: str, path: str, role: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        if not (module_name == missing or module_name.startswith(missing + ".")):
            # The module exists but one of its own imports is missing: a different fix.
            raise CLIError(f"--{role} {path}: importing '{module_name}' failed: {err}") from err
    # The console script does not put the working directory on sys.path as `python -m` does;
    # a model file next to the user is the common case, so look there before giving up.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError:
            pass
    raise CLIError(
        f"--{role} {path}: cannot import module '{module_name}' (no module named '{missing}'); expected "
        "package.module:ClassName with the module importable: is its folder the current directory or on PYTHONPATH?"
    )


def check_model_class(cls: type, path: str) -> None:
    import torch

    if not issubclass(cls, torch.nn.Module):
        raise CLIError(f"--model {path}: {cls.__name__} is not a trainmesh.Module; subclass trainmesh.Module")


def class_groups(configs: list[str], extra: list[str], *, command: str) -> dict[str, dict[str, Any]]:
    """The ``model``, ``data`` and ``trainer`` sections of ``--config`` files (later files win),
    then ``--model.x V`` / ``--data.x=V`` flags on top, for the commands that build no Trainer
    (``scale``, ``estimate``, ``project``); a ``class_path`` entry stays in its group.

    >>> class_groups([], ["--model.hidden_dim", "64", "--data.batch_size=8"], command="estimate")
    {'model': {'hidden_dim': 64}, 'data': {'batch_size': 8}, 'trainer': {}}
    """
    import yaml

    groups: dict[str, dict[str, Any]] = {"model": {}, "data": {}, "trainer": {}}
    for path in configs:
        _class_paths_in_config(path)  # the checks `fit` makes: a file, valid YAML, mappings
        loaded = yaml.safe_load(Path(path).read_text() if Path(path).is_file() else path) or {}
        for role in groups:
            groups[role].update(loaded.get(role) or {})
    pairs = iter(extra)
    for flag in pairs:
        role, _, name = flag.removeprefix("--").partition(".")
        if role not in _CLASS_ROLES or not flag.startswith("--") or not name:
            raise CLIError(f"unknown argument {flag!r}; see `trainmesh {command} --help`")
        name, has_value, value = name.partition("=")
        groups[role][name] = yaml.safe_load(value if has_value else next(pairs, ""))
    return groups
