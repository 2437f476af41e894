"""What a pipeline's first step checks about a stage's forward (strategies/stage_checks.py): an
iterated list counts as run when its members run, and a forward reaching for a part another stage
holds says which stage dropped which part and what the forward must do. In one process: a stage is
nanoGPT (helpers/nanogpt.py) after the cut; the pipelined run is in test_resume_layouts.py."""

import pytest
import torch
from torch import nn

from helpers.nanogpt import GPT, PublishedGPT
from trainmesh.strategies.pipeline_cut import keep_only, split_parts
from trainmesh.strategies.stage_checks import PartOrderCheck, explaining_dropped_parts

TOKENS = torch.zeros(2, 16, dtype=torch.long)


def test_an_iterated_list_counts_as_run_when_its_members_run():
    # nanoGPT's forward iterates transformer.h and never calls it: before, "its forward never ran ['transformer.h']".
    model = GPT()
    parts = ["transformer.wte", "transformer.wpe", "transformer.drop", "transformer.h", "transformer.ln_f", "lm_head"]
    check = PartOrderCheck(model, parts, 0)
    model(TOKENS)
    check.verify()
    skipping = PartOrderCheck(model, parts, 0)
    model.transformer.ln_f(model.lm_head.weight)  # nothing of transformer.h runs
    with pytest.raises(
        RuntimeError,
        match=r"never ran \['transformer.wte', 'transformer.wpe', 'transformer.drop', 'transformer.h', 'lm_head'\]",
    ):
        skipping.verify()


def _stage(model: nn.Module, index: int) -> list[list[str]]:
    cut = split_parts(model, 2, None)
    keep_only(model, set(cut[index]))
    return cut


def test_an_unmodified_forward_names_the_module_its_stage_dropped():
    model = PublishedGPT()
    cut = _stage(model, 0)
    with pytest.raises(RuntimeError) as raised, explaining_dropped_parts({0: model}, cut):
        try:
            model(TOKENS)
        except Exception as error:  # as torch's stage wraps it
            raise RuntimeError("[Stage 0] failed to run forward") from error
    message = str(raised.value)
    assert message.startswith("pipeline stage 0's forward used transformer.ln_f, which the cut gave to stage 1")
    assert "'ModuleDict' object has no attribute 'ln_f'" in message and "if 'wte' in self.transformer" in message
    assert (
        "Stage 0 holds ['transformer.wte', 'transformer.wpe', 'transformer.drop', 'transformer.h.0', 'transformer.h.1']"
        in message
    )


def test_a_dropped_top_level_child_used_as_a_module_is_named_too():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.head = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.head(self.body(x))

    model = Head()
    cut = _stage(model, 0)
    with pytest.raises(RuntimeError, match=r"the cut set \['head'\] to None on stage 0 \(held by stage\(s\) \[1\]\)"):
        with explaining_dropped_parts({0: model}, cut):
            model(torch.ones(1, 2))


def test_other_errors_pass_as_they_are():
    model = GPT()
    cut = _stage(model, 0)
    with pytest.raises(AttributeError, match="no attribute 'elsewhere'"):
        with explaining_dropped_parts({0: model}, cut):
            model.transformer.elsewhere  # noqa: B018 - never a part of any stage
    with pytest.raises(ValueError, match="boom"), explaining_dropped_parts({0: model}, cut):
        raise ValueError("boom")
