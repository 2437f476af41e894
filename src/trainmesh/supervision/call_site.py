"""Where a rank waits, in the user's terms: the collective it is in, the call of the user's that
led there (``trainer.save_checkpoint``, ``v.full_tensor()``) and the user's line, read from its
stack; and what that collective does, in plain words, for the watchdog's message.

A pure function of a stack (``traceback.extract_stack``'s frames), testable without processes.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

import torch

MAX_FRAMES = 40  # the innermost ones: where a rank is matters, not the launcher's frames

# What each collective needs from the other ranks, said so that "call it on every rank" follows.
_WHAT_IT_DOES = {
    "full_tensor": "gathers a sharded tensor's pieces from every rank",
    "redistribute": "moves a sharded tensor's pieces between the ranks",
    "all_reduce": "combines a tensor from every rank",
    "all_gather": "gathers a tensor from every rank",
    "all_gather_into_tensor": "gathers a tensor from every rank",
    "all_gather_object": "gathers an object from every rank",
    "reduce_scatter": "combines and splits tensors across every rank",
    "reduce_scatter_tensor": "combines and splits a tensor across every rank",
    "reduce": "combines a tensor from every rank",
    "gather": "gathers a tensor from every rank",
    "gather_object": "gathers an object from every rank",
    "scatter": "sends a piece to every rank",
    "scatter_object_list": "sends an object to every rank",
    "broadcast": "sends one rank's tensor to every rank",
    "broadcast_object_list": "sends one rank's objects to every rank",
    "all_to_all": "exchanges tensors between every pair of ranks",
    "all_to_all_single": "exchanges tensors between every pair of ranks",
    "barrier": "waits until every rank calls it",
    "monitored_barrier": "waits until every rank calls it",
    "get_model_state_dict": "gathers the model's state from every rank",
    "get_optimizer_state_dict": "gathers the optimizer's state from every rank",
    "get_state_dict": "gathers the model's and optimizer's state from every rank",
    "send": "waits for the rank it sends to",
    "recv": "waits for the rank it receives from",
}
# Frames between the user's call and the function called: decorators and dispatch, not calls.
_PASS_THROUGH = {"wrapper", "inner", "_fn", "fn", "decorate_context", "__call__", "_call_impl", "_wrapped_call_impl"}


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str

    @property
    def place(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


@dataclass(frozen=True)
class CallSite:
    """Where a rank waits: ``collective`` (the innermost known collective, or the call itself),
    ``called`` (what the user's line called), ``user`` (that line; None when the stack holds
    no frame of the user's, e.g. at interpreter exit)."""

    collective: str
    called: str
    user: Frame | None

    def describe(self) -> str:
        """``in full_tensor(), called at run.py:41 in main: weights = v.full_tensor()``."""
        inside = f"in {self.collective}()" if self.collective else "in a call into torch"
        if self.called and self.called != self.collective:
            inside += f" inside {self.called}()"
        if self.user is None:
            return inside
        return f"{inside}, called at {self.user.place}: {self.user.code}"

    def cause(self, ranks: str) -> str:
        """The likely cause in plain words, ``ranks`` ("rank 0") being the ranks that called it."""
        name = self.called or self.collective or "the call"
        what = _WHAT_IT_DOES.get(self.called) or _WHAT_IT_DOES.get(self.collective, "is a collective")
        through = f" (through {self.collective}())" if self.collective and self.collective != name else ""
        return (
            f"a collective called on {ranks} only: {name}(){through} {what}, so every rank must call it. "
            "Call it on every rank (not under `if trainer.is_global_zero:`); to get the whole model on rank 0 "
            "from any strategy, call trainer.full_state_dict() on every rank: rank 0 gets the tensors, the "
            "others None"
        )


def thread_frames(thread_id: int) -> list[Frame]:
    """The Python stack of thread ``thread_id``, outermost first (the innermost ``MAX_FRAMES``)."""
    frame: FrameType | None = sys._current_frames().get(thread_id)
    if frame is None:
        return []
    return [
        Frame(summary.filename, summary.lineno or 0, summary.name, (summary.line or "").strip())
        for summary in traceback.extract_stack(frame)[-MAX_FRAMES:]
    ]


def call_site(frames: Sequence[Frame]) -> CallSite:
    """Where the stack ``frames`` (outermost first) waits, in the user's terms."""
    users = [index for index, frame in enumerate(frames) if not _in_library(frame.file)]
    if not users:
        return CallSite(collective=_collective(frames), called="", user=None)
    last = users[-1]
    inner = frames[last + 1 :]
    called = next((frame.function for frame in inner if frame.function not in _PASS_THROUGH), "")
    return CallSite(collective=_collective(inner) or called, called=called, user=frames[last])


def format_frames(frames: Sequence[Frame]) -> str:
    return "".join(f'  File "{f.file}", line {f.line}, in {f.function}\n    {f.code}\n' for f in frames)


def _collective(frames: Sequence[Frame]) -> str:
    """The outermost known collective among ``frames``: the one the code above it asked for."""
    return next((frame.function for frame in frames if frame.function in _WHAT_IT_DOES), "")


# trainmesh's own directory is the one above this file's package: read from the path, not by importing
# the package's face (which would make this low layer import everything above it).
_TRAINMESH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARIES = tuple(os.path.dirname(module_file) + os.sep for module_file in (torch.__file__,) if module_file) + (
    _TRAINMESH_DIR + os.sep,
    sysconfig.get_paths()["stdlib"] + os.sep,
)


def _in_library(file: str) -> bool:
    return file.startswith("<") or os.path.abspath(file).startswith(_LIBRARIES)
