"""Resuming a checkpoint under another layout: every direction between one process, ddp, fsdp,
tp, pp, fsdp x tp and pp x tp (world 4) either continues like the uninterrupted run, weights and
AdamW state, or is refused before training with the reason (docs/how-to/resume-layouts.md: "Resuming under another
layout"). resume_layouts_run.py trains the tiny Llama (helpers/llama.py, 2 layers) 1 step, saves, and
resumes for 1 more; the reference is the uninterrupted 2-step run at the resuming layout (one
step on each side of the save is enough: the resumed step is where a lost optimizer state or a
restarted loader shows).

Tolerance: bit-equal where the two layouts do the same arithmetic (the same layout; ddp and
fsdp), else every weight within ATOL. The uninterrupted runs of two layouts differ by up to
4.3e-6 (float32 sums in another order, which AdamW's first steps turn into weight differences of
that size; AdamW's eps 1e-6 there), so 1e-6 cannot hold between layouts; a resume that lost the
optimizer state is off by 1.7e-2 (nanoGPT, lr 1e-3: 1.7e-3), one that restarted the data by
1.7e-2 (1.7e-3).

nanoGPT (helpers/nanogpt.py, its layout as published: blocks in ``transformer.h`` inside a
ModuleDict, ``lm_head`` tied to ``transformer.wte``) rides in the same launches: saved on one
process, under fsdp and under tp, resumed under pp=2 (the tie's two names on two stages), against
its uninterrupted pp=2 run; and its pipeline cut, against one process.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))

from helpers.batches import Batches, LegFailed  # noqa: E402

HERE = Path(__file__).parent
SCRIPT = HERE / "resume_layouts_run.py"
# The table of layouts, on its docs page (moved there from the README).
GUIDE = HERE.parents[1] / "docs" / "how-to" / "resume-layouts.md"
ATOL = 1e-4
# resume_layouts_run.py's STEPS: the uninterrupted run's steps, 1 saved (its PAUSE) + 1 resumed. Not imported:
# the script imports DTensor, the pipeline and both models (1.2 CPU-s at every xdist worker's collection).
STEPS = 2
WORLD = {"single": 1, "ddp": 2, "fsdp": 2, "tp": 2, "pp": 2, "fsdp_tp": 4, "pp_tp": 4}
LAYOUTS = list(WORLD)
# Outside the documented table, checked to and from one process only: pp x dp_shard and HSDP
# (dp_replicate=2 x dp_shard=2).
MORE = {"pp_fsdp": 4, "hsdp": 4}
# The table's fsdp is FSDPStrategy(state_dict_type="sharded"); strategy="fsdp" as it is (Lightning's default,
# "full": one file gathered on rank 0) is saved too, and resumed under fsdp and one process.
FULL = {"fsdp_full": 2}
SAME_ARITHMETIC = {frozenset({"ddp", "fsdp"}), frozenset({"fsdp_full", "fsdp"})}
WRITES_A_FILE = {"single", "ddp", "fsdp_full"}  # the others write a distributed checkpoint (a directory)
# A one-file checkpoint whose optimizer state is numbered without the parameters' names (torch's
# optimizer.state_dict() as it is: another program's, or trainmesh's before it recorded them).
UNNAMED = "single.ckpt.unnamed"
REFUSED = ["pp", "pp_tp"]
BY_POSITION = ["tp", "fsdp_tp"]
# nanoGPT's tie, saved without a pipeline and resumed under one (the documented table's "tied" rows).
TIED_SAVED, TIED = ["single", "fsdp", "tp"], ("transformer.wte.weight", "lm_head.weight")


def _plan(root: Path) -> list:
    def leg(mode: str, layout: str, name: str, ckpt: str | None = None, *options: str) -> tuple:
        argv = [mode, str(root / f"{name}.pt"), layout, *([str(root / ckpt)] if ckpt else []), *options]
        return name, {**WORLD, **MORE, **FULL}[layout], argv, {}

    def gpt(mode: str, layout: str, name: str, ckpt: str | None = None, *options: str) -> tuple:
        return leg(mode, layout, f"gpt-{name}", ckpt and f"gpt-{ckpt}", "model=gpt", *options)

    def first(layouts: list[str]) -> list:
        return [
            entry
            for layout in layouts
            for entry in (
                leg("full", layout, f"full-{layout}"),
                leg("pause", layout, f"pause-{layout}", f"{layout}.ckpt"),
            )
        ]

    def resumes(saved: list[str], at: list[str]) -> list:
        return [leg("resume", r, f"{s}-to-{r}", f"{s}.ckpt") for r in at for s in saved]

    def unnamed(layout: str) -> tuple:
        return leg("refused" if layout in REFUSED else "resume", layout, f"unnamed-to-{layout}", UNNAMED)

    two, four = ["ddp", "fsdp", "tp", "pp"], ["fsdp_tp", "pp_tp"]
    # Five launches: a checkpoint is resumed only after the launch that saved it. The refusals
    # come last in theirs.
    return [
        *first(["single"]),
        leg("unnamed", "single", "unnamed", "single.ckpt"),
        gpt("full", "single", "full-single"),
        gpt("pause", "single", "pause-single", "single.ckpt"),
        None,
        *first(two),
        leg("pause", "fsdp_full", "pause-fsdp_full", "fsdp_full.ckpt"),
        *resumes(["single", *two], two),
        *resumes(list(FULL), ["fsdp"]),
        unnamed("tp"),
        gpt("pause", "fsdp", "pause-fsdp", "fsdp.ckpt"),
        gpt("pause", "tp", "pause-tp", "tp.ckpt"),
        gpt("full", "pp", "full-pp"),
        gpt("full", "pp", "split-pp", None, "split=transformer.h.2"),
        *(gpt("resume", "pp", f"{saved}-to-pp", f"{saved}.ckpt") for saved in TIED_SAVED),
        None,
        *first(four),
        *resumes(LAYOUTS, four),
        *first(list(MORE)),
        *resumes(["single"], list(MORE)),
        unnamed("fsdp_tp"),
        unnamed("pp_tp"),
        None,
        *resumes(four, two),
        unnamed("pp"),
        # Fails on the first stage only (the other waits for its activations): last in its launch.
        leg("fails", "pp", "gpt-published", None, "model=published_gpt"),
        None,
        *resumes(LAYOUTS, ["single"]),
        *resumes([*MORE, *FULL], ["single"]),
    ]


class Runs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.batches = Batches(SCRIPT, root, _plan(root), leg_timeout=120, forked=True, fork_workers=True)

    def __call__(self, name: str) -> dict:
        self.batches(name)
        return torch.load(self.root / f"{name}.pt", weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("resume_layouts"))


@pytest.mark.parametrize("layout", [*LAYOUTS, *FULL])
def test_one_process_ddp_and_fsdps_default_write_a_file_the_sharded_layouts_a_directory(runs, layout):
    # First in the module: its cases run the launches one or two at a time, in order, each test
    # well inside the suite's per-test timeout (the first resume cell would wait for all five).
    runs(f"pause-{layout}")
    path = runs.root / f"{layout}.ckpt"
    assert path.is_dir() == (layout not in WRITES_A_FILE)


@pytest.mark.parametrize(
    ("saved", "resumed"),
    [
        *itertools.product(LAYOUTS, LAYOUTS),
        *((layout, "single") for layout in MORE),
        *(("single", x) for x in MORE),
        *((layout, resumed) for layout in FULL for resumed in ("fsdp", "single")),
    ],
)
def test_a_checkpoint_resumes_under_any_layout_like_the_uninterrupted_run(runs, saved, resumed):
    run, reference = runs(f"{saved}-to-{resumed}"), runs(f"full-{resumed}")
    assert run["steps"] == reference["steps"] == STEPS
    # AdamW's step count carried over: a fresh optimizer would count 1 step.
    assert run["adam_steps"] == reference["adam_steps"] == [float(STEPS)]
    ours, theirs = run["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)
    exact = saved == resumed or frozenset({saved, resumed}) in SAME_ARITHMETIC
    for name, tensor in theirs.items():
        if exact:
            assert torch.equal(ours[name], tensor), name
        else:
            torch.testing.assert_close(ours[name], tensor, rtol=0, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")


def test_a_one_file_checkpoint_records_the_optimizer_parameters_names(runs):
    runs("unnamed")  # the run that reads single.ckpt
    checkpoint = torch.load(runs.root / "single.ckpt", weights_only=False)
    (optimizer,) = checkpoint["optimizer_states"]
    (group,) = optimizer["param_groups"]
    assert group["param_names"] == [name for name in checkpoint["state_dict"] if name != "freqs_cis"]
    assert group["params"] == list(range(len(group["param_names"])))


@pytest.mark.parametrize("layout", BY_POSITION)
def test_optimizer_state_numbered_without_names_resumes_by_position_where_every_parameter_is_held(runs, layout):
    # Checkpoints written before the names were recorded: tp and fsdp x tp number them as one process.
    run, reference = runs(f"unnamed-to-{layout}"), runs(f"full-{layout}")
    assert run["adam_steps"] == [float(STEPS)]
    for name, tensor in reference["state_dict"].items():
        torch.testing.assert_close(run["state_dict"][name], tensor, rtol=0, atol=ATOL)


@pytest.mark.parametrize("layout", REFUSED)
def test_a_pipeline_refuses_optimizer_state_numbered_without_names_before_training(runs, layout):
    refused = runs(f"unnamed-to-{layout}")
    assert refused["steps"] == 0
    assert "numbered by position, without the parameters' names" in refused["error"]
    assert "Resume it once without a pipeline" in refused["error"]


def test_the_documented_table_is_what_the_tests_check():
    text = GUIDE.read_text()
    section = text[text.index("## Resuming under another layout") :]
    rows = [line for line in section.splitlines()[1:40] if line.startswith("| ")]
    cells = [[cell.strip(" `") for cell in row.strip().strip("|").split("|")] for row in rows]
    header, body = cells[0][1:], cells[1:]  # (the |---| line is not a "| " row)
    table = {row[0]: dict(zip(header, row[1:])) for row in body}
    # Every cell "resumes", each backed by test_a_checkpoint_resumes_under_any_layout_like_the_uninterrupted_run;
    # the tied rows' pp cells by test_a_tied_model_saved_without_a_pipeline_resumes_under_one.
    tied = {f"{saved}, tied": {r: "resumes" if r == "pp" else "-" for r in LAYOUTS} for saved in TIED_SAVED}
    assert table == {**{saved: {resumed: "resumes" for resumed in LAYOUTS} for saved in LAYOUTS}, **tied}


@pytest.mark.parametrize("saved", TIED_SAVED)
def test_a_tied_model_saved_without_a_pipeline_resumes_under_one(runs, saved):
    # One process, fsdp and tp name the tied parameter once (transformer.wte.weight, its first
    # name); under pp=2 stage 1 holds it as lm_head.weight, and takes the tie's weight and AdamW
    # state from there. Refused before (single: "does not name this run's parameters
    # ['lm_head.weight']"; fsdp, tp: torch's "Missing key ... lm_head.weight.step").
    run, reference = runs(f"gpt-{saved}-to-pp"), runs("gpt-full-pp")
    assert run["steps"] == reference["steps"] == STEPS
    assert run["adam_steps"] == reference["adam_steps"] == [float(STEPS)]  # both stages' copies: 1 saved step + 1
    ours, theirs = run["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs) and torch.equal(ours[TIED[0]], ours[TIED[1]])
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")


def test_nanogpts_layout_is_cut_inside_its_block_list_and_trains_like_one_process(runs):
    # Its blocks sit in transformer.h, a ModuleList inside the ModuleDict transformer: the default cut
    # balances over the blocks (stage 1 from transformer.h.2), split_points=["transformer.h.2"] names
    # the same cut, and the iterated list's blocks are seen to run. Refused before, naming
    # ['transformer.h'] as never run.
    pipelined, single = runs("gpt-full-pp"), runs("gpt-full-single")
    assert pipelined["steps"] == single["steps"] == STEPS
    for name, tensor in single["state_dict"].items():
        torch.testing.assert_close(pipelined["state_dict"][name], tensor, rtol=0, atol=ATOL)
    split = runs("gpt-split-pp")["state_dict"]
    assert all(torch.equal(split[name], tensor) for name, tensor in pipelined["state_dict"].items())


def test_nanogpts_unmodified_forward_under_a_pipeline_names_the_dropped_module_at_the_first_step(runs):
    # Stage 0 (transformer.wte ... transformer.h.1) reaches transformer.ln_f, which stage 1 holds:
    # before, a bare AttributeError: 'ModuleDict' object has no attribute 'ln_f'.
    with pytest.raises(LegFailed) as failed:
        runs("gpt-published")
    message = str(failed.value)
    assert "pipeline stage 0's forward used transformer.ln_f, which the cut gave to stage 1" in message
    assert "must skip what another stage holds" in message and "if 'wte' in self.transformer" in message


def test_a_dp_checkpoint_names_the_parameters_as_the_module_does(tmp_path):
    # dp's splitter holds the module as "module": the names must be the module's own, or a
    # pipeline stage would find none of its parameters in the file.
    import trainmesh as tm
    from helpers.llama import Llama, LlamaConfig, token_loader

    model = Llama(LlamaConfig())
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="dp",
        max_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, token_loader(LlamaConfig(), samples=8))
    trainer.save_checkpoint(tmp_path / "dp.ckpt")
    (optimizer,) = torch.load(tmp_path / "dp.ckpt", weights_only=False)["optimizer_states"]
    assert optimizer["param_groups"][0]["param_names"] == [name for name, _ in model.named_parameters()]


def test_optimizer_state_under_other_names_is_an_error_not_a_fresh_optimizer():
    # Named state is cut down to a stage's own parameters by name: names that match none of them
    # (another model, a prefix) must not leave this run's parameters without their state.
    from torch import nn

    from trainmesh.strategies.stage_state import _only_params_of

    module = nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(module.parameters())
    saved = {
        "state": {"module.weight": {"step": torch.tensor(2.0)}, "module.bias": {"step": torch.tensor(2.0)}},
        "param_groups": [{"lr": 1e-3, "params": ["module.weight", "module.bias"]}],
    }
    with pytest.raises(ValueError, match=r"does not name this run's parameters \['bias', 'weight'\]"):
        _only_params_of(saved, optimizer, module)
    renamed = {
        "state": {k.split(".")[1]: v for k, v in saved["state"].items()},
        "param_groups": [{"lr": 1e-3, "params": ["weight", "bias"]}],
    }
    assert _only_params_of(renamed, optimizer, module)["state"].keys() == {"weight", "bias"}
