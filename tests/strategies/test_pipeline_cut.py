"""Where a pipeline cuts nanoGPT as published (helpers/nanogpt.py): its blocks sit in
``transformer.h``, a ModuleList inside the ModuleDict ``transformer``, and its forward iterates
them. The cut reaches into that list (a split point ``transformer.h.2``, a default balanced over
the blocks), and a stage keeps its blocks under the whole model's names. In one process, no launch;
the pipelined runs are in test_resume_layouts.py."""

import torch
from torch import nn

from helpers.nanogpt import GPT, GPTConfig
from trainmesh.strategies.pipeline_cut import keep_only, pipeline_parts, split_parts, stage_view, whole_model_on_meta

BLOCKS = [f"transformer.h.{i}" for i in range(4)]
FIRST = ["transformer.wte", "transformer.wpe", "transformer.drop", *BLOCKS[:2]]
SECOND = [*BLOCKS[2:], "transformer.ln_f", "lm_head"]


def _count(model: nn.Module, parts: list[str]) -> int:
    return sum(p.numel() for part in parts for p in model.get_submodule(part).parameters())


def test_a_list_inside_a_top_level_dict_is_cut_member_by_member():
    model = GPT()
    assert pipeline_parts(model) == ["transformer.wte", "transformer.wpe", "transformer.drop", *BLOCKS[:4]] + [
        "transformer.ln_f",
        "lm_head",
    ]
    # Before: transformer.h was one part, and "transformer.h.2" named no part.
    assert split_parts(model, 2, ["transformer.h.2"]) == [FIRST, SECOND]
    assert split_parts(model, 2, ["transformer.h"]) == [FIRST[:3], [*BLOCKS, "transformer.ln_f", "lm_head"]]


def test_the_default_cut_balances_nanogpt_over_its_blocks():
    model = GPT()
    cut = split_parts(model, 2, None)
    assert cut == [FIRST, SECOND]  # before: [wte, wpe] against everything else
    # The tied matrix counts on both stages (each keeps a copy); the halves differ by a block's share.
    block = _count(model, ["transformer.h.0"])
    assert abs(_count(model, cut[0]) - _count(model, cut[1])) < block


def test_a_stage_keeps_its_blocks_under_the_whole_models_names_and_runs_them():
    model, view_of = GPT(), GPT()
    whole = dict(model.named_parameters(remove_duplicate=False))
    keep_only(model, set(SECOND))
    assert list(model.transformer._modules) == ["h", "ln_f"] and list(model.transformer.h._modules) == ["2", "3"]
    kept = dict(model.named_parameters())
    assert all(kept[name] is whole[name] for name in kept)
    assert sorted(kept) == sorted(
        n for n in whole if n.startswith(("transformer.h.2.", "transformer.h.3.", "transformer.ln_f.", "lm_head."))
    )
    assert model(torch.randn(2, 16, GPTConfig().n_embd)).shape == (2, 16, GPTConfig().vocab_size)
    first = stage_view(view_of, set(FIRST))
    assert list(first.transformer.h._modules) == ["0", "1"] and first.transformer.h[1] is view_of.transformer.h[1]
    assert "ln_f" not in first.transformer and first.lm_head is None and len(view_of.transformer.h) == 4


def test_a_meta_build_puts_the_dropped_blocks_back_for_the_initialisers():
    with torch.device("meta"):
        model = GPT()
    keep_only(model, set(SECOND))
    with whole_model_on_meta(model) as back:
        assert back and len(model.transformer.h) == 4 and "wte" in model.transformer
    assert list(model.transformer.h._modules) == ["2", "3"] and "wte" not in model.transformer
