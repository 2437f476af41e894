"""Under a pipeline only the last stage computes the loss and what self.log records; callbacks
and loggers on every rank must still decide alike (a rank that saves or stops alone would hang
the others). One real 2-stage run on gloo; and a user's own loop over a pipeline, through the
Runtime's step calls."""

import csv
import json

import pytest
from legs import run


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("pp_callbacks")
    result = run("pipeline_callbacks_run.py", str(out), timeout=240, forked=True, world=2)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_early_stopping_and_checkpointing_decide_alike_on_every_stage(ranks):
    first, last = ranks
    # Stopped by EarlyStopping after the second epoch (patience 0, no improvement of 10), on both ranks.
    assert first["stopped"] and last["stopped"]
    assert first["epoch"] == last["epoch"] == 2 and first["step"] == last["step"] == 12
    assert first["best"] == last["best"] and first["best"].endswith(".ckpt")
    assert first["metrics"] == last["metrics"]
    assert set(first["metrics"]) >= {"val_loss", "val_acc", "train_loss", "train_loss_epoch", "train_loss_step"}


def test_the_first_stage_sees_the_last_stages_step_losses(ranks):
    first, last = ranks
    assert len(first["step_losses"]) == 12 and None not in first["step_losses"]
    assert first["step_losses"] == last["step_losses"]


def test_the_logger_on_rank_zero_writes_the_last_stages_metrics(ranks):
    # Rank 0 holds the first stage (no loss of its own) and is the rank that writes the logs.
    rows = list(csv.DictReader(open(f"{ranks[0]['log_dir']}/metrics.csv")))
    logged = [float(r["train_loss_step"]) for r in rows if r.get("train_loss_step")]
    val = [float(r["val_loss"]) for r in rows if r.get("val_loss")]
    assert len(val) == 2 and val[-1] == pytest.approx(ranks[0]["metrics"]["val_loss"], abs=1e-6)
    assert logged == pytest.approx(ranks[0]["step_losses"], abs=1e-6)  # one row per step (log_every_n_steps=1)


def test_a_users_own_loop_trains_a_pipeline_through_runtime_steps(tmp_path):
    # runtime.train_step / eval_step run the schedule; the weights and predictions equal the
    # same loop on one process (tolerance 1e-5).
    import torch

    results, worlds = {}, {"single": 1, "pp": 2}
    for layout in worlds:
        out = tmp_path / f"{layout}.pt"
        result = run("pipeline_user_loop_run.py", str(out), layout, timeout=180, forked=True, world=worlds[layout])
        assert result.returncode == 0, result.stderr[-3000:]
        results[layout] = torch.load(out)
    single, pipelined = results["single"], results["pp"]
    assert single["state_dict"].keys() == pipelined["state_dict"].keys()
    for name, tensor in single["state_dict"].items():
        torch.testing.assert_close(pipelined["state_dict"][name], tensor, rtol=0, atol=1e-5)
    assert pipelined["predictions"].shape == (40, 4)
    torch.testing.assert_close(pipelined["predictions"], single["predictions"], rtol=0, atol=1e-5)
