"""Model parallelism trained for real: ModelParallelStrategy's layouts (tensor parallel, pipeline
schedules, FSDP x TP, pipeline x replicate) in real processes on gloo, each against one process
training the same model on the same data (model_parallel_run.py: global batch 16 everywhere).

Tolerance, everywhere: every weight within ATOL (1e-5) absolute, and val_loss / train_loss
within ATOL; checkpoints that must restore weights compare them exactly. The layouts measured
within 2.4e-7 of one process (float32 reordering of the same sums); a lost micro-batch, a
gradient scaled twice or a skipped clip moves weights by 1e-3 to 1e-1.

The programs are shared: each (layout, options) runs once per module (``Legs``), so the
reference runs and the checkpointing runs serve several tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from legs import HERE, run

SCRIPT = HERE / "model_parallel_run.py"
ATOL = 1e-5
METRICS = ("val_loss", "train_loss")
STEPS = 12  # 96 samples / 16 per step x 2 epochs


class RunFailed(Exception):
    """A program exited non-zero (its stderr tail is the message)."""


CLIPPED = {"clip": 0.05, "accumulate": 2}

# Every leg the tests below use, launched once each, in batches of one world size (one launch,
# one process group per batch: starting 2-8 interpreters per leg was most of this module's time).
# The order matters: a leg that resumes a checkpoint comes after the leg that saves it.
PLAN: list[tuple[str, dict]] = [
    # world 4 (fsdp_tp saves the checkpoint that ddp and single resume)
    ("fsdp_tp", {"save": "fsdp_tp.ckpt"}), ("fsdp_tp", {"accumulate": 2}), ("fsdp_tp", CLIPPED),
    ("fsdp_tp", {"evaluate": 1}), ("pp_replicate", {}), ("pp_fsdp", {}), ("pp_tp_ac", {}),
    # world 2
    ("pp_1f1b", {"save": "pp_1f1b.ckpt"}), ("pp_1f1b", {"resume": "pp_1f1b.ckpt"}),
    ("ddp", {"resume": "fsdp_tp.ckpt"}), ("pp_1f1b", {"clip": 0.05}), ("pp_1f1b", CLIPPED),
    ("pp_1f1b", {"evaluate": 1}), ("pp_gpipe", {}), ("pp_interleaved", {}), ("pp_zbv", {"val": 0}),
    ("pp_looped", {}), ("pp_izb", {}), ("pp_dualpipev", {"val": 0}), ("tp", {}), ("tp_lossp", {}),
    ("tp", {"clip": 0.05}),
    # world 1: the references, and the resumes on one process
    ("single", {}), ("single", {"val": 0}), ("single", {"clip": 0.05}), ("single", {"accumulate": 2}),
    ("single", CLIPPED), ("single", {"evaluate": 1}), ("single", {"epochs": 3}),
    ("single", {"resume": "pp_1f1b.ckpt"}), ("single", {"resume": "pp_1f1b.ckpt", "epochs": 3}),
    ("single", {"resume": "fsdp_tp.ckpt", "epochs": 3}),
    # world 8
    ("pp_fsdp_tp", {}),
]


def _world(layout: str) -> int:
    import model_parallel_run

    return model_parallel_run.LAYOUTS[layout][0]


class Legs:
    """Runs ``model_parallel_run.py`` legs (a layout and KEY=VALUE options) and keeps their outputs.

    The first request runs the whole PLAN; a leg outside it runs alone. A checkpoint path option
    (``save=``/``resume=``) is a name inside this module's folder.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[tuple, dict | RunFailed] = {}
        self.planned = False

    def __call__(self, layout: str, timeout: float = 180, **options: object) -> dict:
        key = self._key(layout, options)
        if key not in self.done and not self.planned:
            self.planned = True
            self._run_plan()
        if key not in self.done:
            self._launch([(layout, options)], timeout=timeout)
        saved = self.done[key]
        if isinstance(saved, RunFailed):
            raise saved
        return saved

    def checkpoint(self, layout: str, **options: object) -> tuple[Path, dict]:
        """The run of ``layout`` that saves a checkpoint at the end: (its path, its output)."""
        return self.root / f"{layout}.ckpt", self(layout, save=f"{layout}.ckpt", **options)

    def _key(self, layout: str, options: dict) -> tuple:
        return (layout, *sorted((k, str(v)) for k, v in options.items()))

    def _run_plan(self) -> None:
        batch: list[tuple[str, dict]] = []
        for layout, options in PLAN:
            if batch and _world(batch[0][0]) != _world(layout):
                self._launch(batch, timeout=120 * len(batch))
                batch = []
            batch.append((layout, options))
        self._launch(batch, timeout=120 * len(batch))

    def _launch(self, legs: list[tuple[str, dict]], *, timeout: float) -> None:
        import json

        specs = []
        for layout, options in legs:
            folder = self.root / "-".join([layout, *(f"{k}={v}" for k, v in sorted(options.items()))])
            folder.mkdir()
            opts = {k: str(self.root / str(v)) if k in ("save", "resume") else str(v) for k, v in options.items()}
            specs.append([str(folder / "out.pt"), layout, opts])
        batch_file = self.root / f"batch-{len(self.done)}.json"
        batch_file.write_text(json.dumps(specs))
        result = run(str(SCRIPT), "--batch", str(batch_file), timeout=timeout)
        for (layout, options), (out, _, _) in zip(legs, specs):
            errors = sorted(Path(out).parent.glob("out.pt.error-*"))
            if errors:
                failure = RunFailed(f"{layout} {options} failed:\n" + errors[0].read_text()[-4000:])
            elif result.returncode != 0 or not Path(out).exists():
                failure = RunFailed(f"{layout} {options} did not run: its launch exited {result.returncode} "
                                    f"(an earlier leg of the batch failed?):\n{result.stderr[-4000:]}")
            else:
                self.done[self._key(layout, options)] = torch.load(out)
                continue
            self.done[self._key(layout, options)] = failure


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Legs:
    return Legs(tmp_path_factory.mktemp("model_parallel"))


def max_difference(saved: dict, reference: dict) -> float:
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)  # every layer came back, under the one-process names
    return max(float((ours[name].double() - theirs[name].double()).abs().max()) for name in theirs)


def assert_matches(saved: dict, reference: dict, *, metrics: tuple[str, ...] = METRICS, steps: int = STEPS) -> None:
    """Same steps, every weight within ATOL, and the named metrics within ATOL."""
    assert saved["steps"] == reference["steps"] == steps
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert ours[name].shape == tensor.shape, name
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=ATOL, msg=lambda m, name=name: f"{name}: {m}")
    for metric in metrics:
        assert metric in saved["metrics"] and metric in reference["metrics"], metric
        assert float(saved["metrics"][metric]) == pytest.approx(float(reference["metrics"][metric]), abs=ATOL), metric


def assert_identical(saved: dict, reference: dict) -> None:
    ours, theirs = saved["state_dict"], reference["state_dict"]
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name


# ---- 1. tensor parallel, world 2 ------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["tp", "tp_lossp"])
def test_tensor_parallel_matches_one_process(legs, layout):
    # tp_lossp: the head's logits stay vocabulary-sharded and cross-entropy runs under loss_parallel.
    assert_matches(legs(layout), legs("single"))


# ---- 2. pipeline schedules, world 2 ---------------------------------------------------------------

@pytest.mark.parametrize("layout", ["pp_gpipe", "pp_1f1b", "pp_interleaved"])
def test_pipeline_schedules_with_validation_match_one_process(legs, layout):
    # pp_1f1b is the run that also saves the checkpoint of the tests below (saving changes no weight).
    saved = legs.checkpoint("pp_1f1b")[1] if layout == "pp_1f1b" else legs(layout)
    assert_matches(saved, legs("single"))


def test_zero_bubble_v_schedule_matches_one_process_without_validation(legs):
    # V-shaped schedules refuse forward-only steps by design, so no validation here.
    assert_matches(legs("pp_zbv", val=0), legs("single", val=0), metrics=("train_loss",))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["pp_looped", "pp_izb"])
def test_the_other_multi_stage_schedules_match_one_process(legs, layout):
    # LoopedBFS and InterleavedZeroBubble (split input/weight backward), with validation.
    assert_matches(legs(layout), legs("single"))


@pytest.mark.slow
def test_dualpipev_matches_one_process_without_validation(legs):
    assert_matches(legs("pp_dualpipev", val=0), legs("single", val=0), metrics=("train_loss",))


@pytest.mark.slow
def test_pipeline_x_tensor_parallel_with_activation_checkpointing_matches_one_process(legs):
    # pp=2 x tp=2 on 4 processes, each block recomputed in backward: the cut, TP, then checkpointing.
    assert_matches(legs("pp_tp_ac"), legs("single"))


# ---- 3. two-dimensional meshes, world 4 -----------------------------------------------------------

@pytest.mark.slow
def test_fsdp_x_tp_matches_one_process(legs):
    # tp pairs sharded by FSDP across them; the run that also saves the fsdp_tp checkpoint below.
    assert_matches(legs.checkpoint("fsdp_tp")[1], legs("single"))


@pytest.mark.slow
def test_pipeline_x_replicate_with_validation_matches_one_process(legs):
    # Two pipelines of 2 stages, replicated by FSDP2's replicate; evaluation runs through the pipeline.
    assert_matches(legs("pp_replicate"), legs("single"))


# ---- 4. validation + gradient clipping + accumulation ---------------------------------------------


def test_clipping_really_clips_in_the_reference(legs):
    """Without this, the clipped comparisons below would pass with clipping ignored."""
    clipped, unclipped = legs("single", **CLIPPED), legs("single", accumulate=2)
    assert clipped["steps"] == unclipped["steps"] == STEPS // 2
    assert max_difference(clipped, unclipped) > 100 * ATOL  # measured 1.2e-2
    assert max_difference(legs("single", clip=0.05), legs("single")) > 100 * ATOL  # measured 1.5e-2


def test_pipeline_clips_by_the_norm_of_every_stage(legs):
    assert_matches(legs("pp_1f1b", clip=0.05), legs("single", clip=0.05))


def test_tensor_parallel_clips_like_one_process(legs):
    assert_matches(legs("tp", clip=0.05), legs("single", clip=0.05))


def test_pipeline_with_validation_clipping_and_accumulation_matches_one_process(legs):
    assert_matches(legs("pp_1f1b", **CLIPPED), legs("single", **CLIPPED), steps=STEPS // 2)


@pytest.mark.slow
def test_fsdp_x_tp_accumulates_like_one_process(legs):
    assert_matches(legs("fsdp_tp", accumulate=2), legs("single", accumulate=2), steps=STEPS // 2)


@pytest.mark.slow
def test_fsdp_x_tp_with_validation_clipping_and_accumulation_matches_one_process(legs):
    assert_matches(legs("fsdp_tp", **CLIPPED), legs("single", **CLIPPED), steps=STEPS // 2)


@pytest.mark.slow
def test_pipeline_x_fsdp_with_validation_matches_one_process(legs):
    # Evaluation batches differ in size between the data-parallel shards (24 and 16 samples):
    # the shards are gathered once per batch on both, so the FSDP collectives stay paired.
    assert_matches(legs("pp_fsdp"), legs("single"))


@pytest.mark.slow
def test_pipeline_x_fsdp_x_tensor_parallel_on_eight_processes_matches_one_process(legs):
    # 3-D: pp=2 stages x dp_shard=2 shards x tp=2 ways, with validation.
    assert_matches(legs("pp_fsdp_tp"), legs("single"))


@pytest.mark.parametrize("layout", ["pp_1f1b", "fsdp_tp"])
def test_test_and_predict_after_fit_match_one_process(legs, layout):
    # 37 samples: each data-parallel shard ends with a short batch, run in fewer micro-batches.
    got, expected = legs(layout, evaluate=1), legs("single", evaluate=1)
    assert got["test"][0]["test_loss"] == pytest.approx(expected["test"][0]["test_loss"], abs=ATOL)
    assert got["predictions"].shape == expected["predictions"].shape == (37, 4)
    torch.testing.assert_close(got["predictions"], expected["predictions"], rtol=0, atol=ATOL)


# ---- 5. checkpoints -------------------------------------------------------------------------------

def test_pipeline_writes_a_distributed_checkpoint_with_every_stage(legs):
    path, _ = legs.checkpoint("pp_1f1b")
    assert path.is_dir() and (path / ".metadata").exists()
    assert len(list(path.glob("*.distcp"))) == 2  # one per stage


@pytest.mark.slow
def test_pipeline_checkpoint_resumes_on_one_process_with_the_same_weights(legs):
    path, trained = legs.checkpoint("pp_1f1b")
    resumed = legs("single", resume=path.name)  # epochs=2, as saved: no training step runs
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["pp_1f1b", "fsdp_tp"])
def test_a_model_parallel_checkpoint_continues_on_one_process_like_an_uninterrupted_run(legs, layout):
    path, _ = legs.checkpoint(layout)
    assert_matches(legs("single", resume=path.name, epochs=3), legs("single", epochs=3), steps=STEPS * 3 // 2)


def test_consolidated_pipeline_checkpoint_holds_the_whole_trained_model(legs, tmp_path):
    from trainmesh.cli.main import main

    path, trained = legs.checkpoint("pp_1f1b")
    target = tmp_path / "whole.ckpt"
    assert main(["checkpoint", "consolidate", str(path), str(target)]) == 0
    whole = torch.load(target, weights_only=False)
    assert whole["global_step"] == STEPS
    assert_identical({"state_dict": whole["state_dict"]}, trained)
    # Adam's moments of both stages' parameters.
    (optimizer,) = whole["optimizer_states"]
    assert sorted(optimizer["state"]) == sorted(trained["state_dict"])
    assert all({"exp_avg", "exp_avg_sq"} <= set(state) for state in optimizer["state"].values())


@pytest.mark.slow
def test_pipeline_checkpoint_resumes_under_the_same_pipeline_with_the_same_weights(legs):
    path, trained = legs.checkpoint("pp_1f1b")
    resumed = legs("pp_1f1b", resume=path.name)
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)


def test_consolidated_pipeline_checkpoint_optimizer_groups_name_every_parameter(legs, tmp_path):
    from trainmesh.checkpoint.distributed import consolidate

    path, trained = legs.checkpoint("pp_1f1b")
    whole = torch.load(consolidate(path, tmp_path / "whole.ckpt"), weights_only=False)
    (optimizer,) = whole["optimizer_states"]
    assert sorted(p for group in optimizer["param_groups"] for p in group["params"]) == sorted(trained["state_dict"])


@pytest.mark.slow
def test_fsdp_x_tp_checkpoint_resumes_under_ddp_with_the_same_weights(legs):
    path, trained = legs.checkpoint("fsdp_tp")
    assert path.is_dir() and len(list(path.glob("*.distcp"))) == 4
    resumed = legs("ddp", resume=path.name)  # epochs=2, as saved: no training step runs
    assert resumed["steps"] == STEPS
    assert_identical(resumed, trained)




@pytest.mark.slow
def test_a_resumed_epoch_reports_its_own_train_loss(legs):
    path, _ = legs.checkpoint("fsdp_tp")
    resumed, uninterrupted = legs("single", resume=path.name, epochs=3), legs("single", epochs=3)
    assert float(resumed["metrics"]["train_loss"]) == pytest.approx(float(uninterrupted["metrics"]["train_loss"]),
                                                                     abs=ATOL)
