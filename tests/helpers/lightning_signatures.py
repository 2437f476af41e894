"""Lightning 2.6's signatures beside trainmesh's, for `tests/test_lightning_signatures.py`.

The inventory (`lightning_inventory.py`) checks names; this compares the parameters of every
Lightning 2.6 public class and function trainmesh has (the inventory's modules), and of the methods
of the Trainer, LightningModule, LightningDataModule and Callback: each parameter Lightning's
signature has must be accepted by trainmesh's by name, and Lightning's positional parameters must
sit at the same positions (a program passes `ModelCheckpoint(dirpath, filename)` or
`on_train_start(trainer, pl_module)` by position). Strategy classes are left to their own tests
(`tests/strategies/`), and names trainmesh refuses as a whole (XLA, DeepSpeed, ...) are skipped:
using them stops already.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lightning_inventory as inventory  # noqa: E402

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
# Lightning's classes whose methods are compared, with trainmesh's class and the base whose
# members are not Lightning's own (torch's nn.Module for the LightningModule).
MEMBER_CLASSES = ("Trainer", "LightningModule", "LightningDataModule", "Callback")
SKIPPED_AREAS = ("lightning.pytorch.strategies.",)  # the strategies' own tests compare them


def _signature(obj: Any) -> inspect.Signature | None:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def _member_pairs() -> Iterator[tuple[str, Any, Any]]:
    import lightning.pytorch as L
    import torch

    import trainmesh as tm

    ours = {"Trainer": tm.Trainer, "LightningModule": tm.Module, "LightningDataModule": tm.DataModule}
    ours["Callback"] = tm.Callback
    for cls_name in MEMBER_CLASSES:
        theirs = getattr(L, cls_name)
        minus = set(dir(torch.nn.Module)) if cls_name == "LightningModule" else set()
        for name in sorted(dir(theirs)):
            if name.startswith("_") or name in minus or not hasattr(ours[cls_name], name):
                continue
            their_value = inspect.getattr_static(theirs, name)
            our_value = inspect.getattr_static(ours[cls_name], name)
            if isinstance(their_value, property) or isinstance(our_value, property):
                continue
            their_value, our_value = getattr(theirs, name), getattr(ours[cls_name], name)
            if callable(their_value) and callable(our_value):
                yield f"{cls_name}.{name}", their_value, our_value


def _module_pairs() -> Iterator[tuple[str, Any, Any]]:
    for area, name in inventory.lightning_names():
        kind, place = inventory._trainmesh_place(area)
        if kind != "module" or area.startswith(SKIPPED_AREAS) or place is None:
            continue
        try:
            theirs = getattr(importlib.import_module(area.rstrip(".")), name)
            ours = getattr(importlib.import_module(place), name)
        except (ImportError, AttributeError):
            continue  # a name trainmesh lacks: the inventory counts it
        if not (callable(theirs) and callable(ours)) or inventory.refusal(area, name) is not None:
            continue
        yield area.removeprefix("lightning.pytorch.") + name, theirs, ours


def _callback_hook_pairs() -> Iterator[tuple[str, Any, Any]]:
    """Each built-in callback's hooks (the Callback base's methods), as ``callbacks.X.hook``: a program
    calls ``cb.on_train_batch_end(trainer=..., pl_module=..., ...)`` or ``super().hook(...)`` by keyword."""
    import lightning.pytorch as L

    import trainmesh.callbacks as ours_module

    hooks = [n for n in sorted(vars(L.Callback)) if not n.startswith("_") and callable(getattr(L.Callback, n))]
    for name in sorted(L.callbacks.__all__):
        theirs, ours = getattr(L.callbacks, name), getattr(ours_module, name, None)
        if ours is None or name == "Callback" or inventory.refusal("lightning.pytorch.callbacks.", name) is not None:
            continue
        for hook in hooks:
            their_hook, our_hook = getattr(theirs, hook, None), getattr(ours, hook, None)
            if callable(their_hook) and callable(our_hook):
                yield f"callbacks.{name}.{hook}", their_hook, our_hook


def pairs() -> Iterator[tuple[str, Any, Any]]:
    """(key, Lightning's callable, trainmesh's) for everything compared."""
    yield from _module_pairs()
    yield from _member_pairs()
    yield from _callback_hook_pairs()


def differences(theirs: Any, ours: Any) -> dict[str, str]:
    """{parameter: what is wrong} for each Lightning parameter trainmesh's signature does not take
    by name, or takes at another position."""
    their_sig, our_sig = _signature(theirs), _signature(ours)
    if their_sig is None or our_sig is None:
        return {}
    their_params = [p for p in their_sig.parameters.values() if p.name not in ("self", "cls")]
    our_params = [p for p in our_sig.parameters.values() if p.name not in ("self", "cls")]
    by_name = {p.name: p for p in our_params if p.kind not in VARIADIC}
    found: dict[str, str] = {}
    for index, param in enumerate(their_params):
        if param.kind in VARIADIC:
            continue
        mine = by_name.get(param.name)
        if mine is None or mine.kind is inspect.Parameter.POSITIONAL_ONLY:
            found[param.name] = "missing"
        elif param.kind in POSITIONAL and (
            index >= len(our_params) or our_params[index].name != param.name or mine.kind not in POSITIONAL
        ):
            found[param.name] = f"not at position {index}"
    return found


def all_differences() -> dict[str, str]:
    """{"key(parameter)": what is wrong} over everything compared."""
    return {
        f"{key}({param})": problem
        for key, theirs, ours in pairs()
        for param, problem in differences(theirs, ours).items()
    }


Call = Callable[[], Any]


# ---- the parameters trainmesh does not take as Lightning does, each with its reason ----------
# kind: "refused" (the name is taken and stops with ``reason``, which ``call`` shows), "in progress"
# (another branch adds it: it must still be missing here), "not yet" (missing, work left), "torch"
# (the class is torch's own, whose signature torch decides).
TENSORRT = "to_tensorrt compiles for NVIDIA TensorRT"
DDP_TYPE = (
    "torch: trainmesh re-exports torch's own DistributedDataParallel, which added init_sync before "
    "process_group; Lightning's Protocol types an older torch's signature (by name, every one is taken)"
)
TABLE: dict[str, tuple[str, str]] = {
    **{
        f"LightningModule.to_tensorrt({n})": ("refused", TENSORRT)
        for n in (
            "file_path",
            "input_sample",
            "ir",
            "output_format",
            "retrace",
            "default_device",
        )
    },  # fmt: skip
    **{
        f"utilities.types.DistributedDataParallel({n})": ("torch", DDP_TYPE)
        for n in (
            "process_group",
            "bucket_cap_mb",
            "find_unused_parameters",
            "check_reduction",
            "gradient_as_bucket_view",
            "static_graph",
        )
    },  # fmt: skip
}


def refusal_calls() -> dict[str, Call]:
    """For each refused entry, a call that passes the parameter (its error must show the reason)."""
    import trainmesh as tm

    class Tiny(tm.Module):
        pass

    calls: dict[str, Call] = {}
    for key, (kind, _) in TABLE.items():
        if kind == "refused" and key.startswith("LightningModule.to_tensorrt("):
            param = key[len("LightningModule.to_tensorrt(") : -1]
            calls[key] = lambda param=param: Tiny().to_tensorrt(**{param: None})
    return calls
