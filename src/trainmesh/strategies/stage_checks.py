"""What a pipeline's first step checks about each stage's forward (the model's own, run on a
stage that holds some of its parts only).

``PartOrderCheck``: the stage ran exactly its parts, in their registration order (a forward that
runs parts in another order is an error, not a wrong model). ``explaining_dropped_parts``: a
forward that reaches for a part another stage holds (nanoGPT's unmodified ``self.transformer.drop``
on a stage without it) fails with what the stage dropped and what the forward must do, instead of
a bare ``AttributeError`` from inside torch's schedule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torch import nn

from trainmesh.strategies.pipeline_cut import ITERATED


class PartOrderCheck:
    """Records which parts a stage's forward ran, in which order, to compare with its cut. A list
    or dict among them (iterated, never called) counts as run when one of its members runs."""

    def __init__(self, stage_module: nn.Module, parts: list[str], stage_index: int) -> None:
        self.parts, self.stage_index, self.seen = parts, stage_index, []  # type: ignore[var-annotated]
        self.handles = []
        for name in parts:
            part = stage_module.get_submodule(name)
            members = list(part.children()) if isinstance(part, ITERATED) else [part]
            self.handles += [member.register_forward_pre_hook(self._recorder(name)) for member in members]

    def _recorder(self, name: str) -> Callable[..., None]:
        def record(*_: Any) -> None:
            if name not in self.seen:
                self.seen.append(name)

        return record

    def verify(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self.seen == self.parts:
            return
        skipped = [p for p in self.parts if p not in self.seen]
        problem = f"its forward never ran {skipped}" if skipped else f"its forward ran them in the order {self.seen}"
        raise RuntimeError(
            f"pipeline stage {self.stage_index} holds the parts {self.parts} (in registration order), but {problem}. "
            "A stage's parts must run in the order the model registers them, each on the stage's input: register "
            "the layers in the order forward uses them, or name split_points that follow it"
        )


_SKIP = (
    "A stage runs the model's own forward, so it must skip what another stage holds: a dropped member of a "
    "container is absent (`if 'wte' in self.transformer: ...`, and `for block in self.transformer.h` runs this "
    "stage's blocks only), a dropped top-level child is None (`if self.lm_head is not None: ...`); the stage "
    "that holds nothing before a part receives the previous stage's output as the forward's input"
)


@contextlib.contextmanager
def explaining_dropped_parts(stages: Mapping[int, nn.Module], cut: Sequence[Sequence[str]]) -> Iterator[None]:
    """Around a pipeline's first step: an error from a forward that used a part this rank's stages
    do not hold (``cut``: every stage's parts) is raised again saying which stage dropped which
    part and what the forward must do. Other errors pass as they are."""
    try:
        yield
    except Exception as error:
        message = _dropped_part_used(error, stages, cut)
        if message is None:
            raise
        raise RuntimeError(message) from error


def _dropped_part_used(
    error: BaseException, stages: Mapping[int, nn.Module], cut: Sequence[Sequence[str]]
) -> str | None:
    holder = {part: index for index, parts in enumerate(cut) for part in parts}
    cause: BaseException | None = error
    while cause is not None:  # torch wraps a stage's error in its own RuntimeError
        if isinstance(cause, AttributeError) and isinstance(getattr(cause, "obj", None), nn.Module):
            for index, stage in sorted(stages.items()):
                container = next((n for n, m in stage.named_modules(remove_duplicate=False) if m is cause.obj), None)
                name = f"{container}.{cause.name}" if container else str(cause.name)
                if container is not None and name in holder and name not in cut[index]:
                    return (
                        f"pipeline stage {index}'s forward used {name}, which the cut gave to stage {holder[name]}: on "
                        f"stage {index} it is absent from {container} ({type(cause.obj).__name__}: {cause}). {_SKIP}. "
                        f"Stage {index} holds {list(cut[index])}"
                    )
        if isinstance(cause, (AttributeError, TypeError)) and "'NoneType' object" in str(cause):
            for index, stage in sorted(stages.items()):
                dropped = [name for name, child in stage._modules.items() if child is None and name in holder]
                if dropped:
                    held_by = sorted({holder[name] for name in dropped})
                    return (
                        f"pipeline stage {index}'s forward failed on None ({type(cause).__name__}: {cause}); the cut "
                        f"set {dropped} to None on stage {index} (held by stage(s) {held_by}). {_SKIP}. "
                        f"Stage {index} holds {list(cut[index])}"
                    )
        cause = cause.__cause__ or cause.__context__
    return None
