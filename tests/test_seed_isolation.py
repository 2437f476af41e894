"""A seeded program draws the same numbers as under Lightning: the sanity check gives every
global generator back as it found it (Lightning runs it in ``isolate_rng``), and trainmesh's own
imports (``import trainmesh``, the progress bar's rich, the loggers, the CLI) draw nothing.

Run as a script (``python test_seed_isolation.py digits SANITY DIGITS_FILE``), this file is the seeded digits
program compared with Lightning 2.6.6.
"""

import functools
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).parent))

import trainmesh as tm  # noqa: E402
from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.models import flat_weights, quiet_trainer, random_classification  # noqa: E402
from helpers.processes import run_program  # noqa: E402
from trainmesh.seed import import_leaving_rng, isolate_rng  # noqa: E402


def generator_states() -> dict:
    """Every global generator's state, comparable with ``==`` (CUDA's only once initialized)."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    states = {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), position, has_gauss, gauss),
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = [state.tolist() for state in torch.cuda.get_rng_state_all()]
    return states


class DrawsInValidation(tm.Module):
    """Dropout in training; validation_step draws from torch, Python's random and NumPy."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 4)
        )
        self.around_sanity_check: list[dict] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        noise = 0.01 * random.random() + 0.01 * float(np.random.rand())
        return torch.nn.functional.cross_entropy(self.net(x + noise), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        drawn = torch.rand(()) + random.random() + float(np.random.rand())
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y) + 0 * drawn)

    def on_fit_start(self):
        self.around_sanity_check.append(generator_states())

    def on_train_start(self):
        self.around_sanity_check.append(generator_states())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@functools.cache  # seeded and deterministic: each setting's fit once per file, shared by the tests
def seeded_fit(num_sanity_val_steps: int) -> DrawsInValidation:
    tm.seed_everything(7)
    model = DrawsInValidation()
    data = random_classification(num_samples=64)
    train = DataLoader(data, batch_size=8, shuffle=True)
    val = DataLoader(data, batch_size=8, shuffle=True)  # its order is drawn from the global RNG
    quiet_trainer(max_epochs=2, num_sanity_val_steps=num_sanity_val_steps).fit(model, train, val)
    return model


@pytest.fixture(autouse=True)
def _keep_seed_settings(monkeypatch):
    import trainmesh.seed

    monkeypatch.setattr(trainmesh.seed, "_settings", trainmesh.seed._settings)


def test_the_sanity_check_leaves_every_generator_as_it_found_it():
    # Between on_fit_start and on_train_start the train loader's iterator also starts (drawing its
    # base seed from torch, there as in Lightning): the sanity check leaves the generators as a run
    # without it has them, at both hooks.
    with_check = seeded_fit(num_sanity_val_steps=2).around_sanity_check
    assert with_check == seeded_fit(num_sanity_val_steps=0).around_sanity_check
    before, after = with_check
    assert before["python"] == after["python"] and before["numpy"] == after["numpy"]
    # ... although it drew: with nothing isolating it, validation moves every generator.
    with isolate_rng():
        start = generator_states()
        DrawsInValidation().validation_step(next(iter(DataLoader(random_classification(8), batch_size=8))), 0)
        assert all(generator_states()[name] != start[name] for name in ("python", "numpy", "torch"))
    assert generator_states() == start


def draws_then_raises_in_validation(base: type) -> Any:
    class DrawsThenRaises(base):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            torch.rand(3), random.random(), np.random.rand()
            raise RuntimeError("validation failed")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return DrawsThenRaises()


def test_a_raising_sanity_check_leaves_the_generators_where_lightnings_does(tmp_path):
    # Both owners' isolate_rng restores after a bare ``yield``: a block that raises keeps what it
    # drew, so a program that catches the failed fit draws on from there (pytorch-lightning 1.9.5
    # too: l-progs12 p04, whose validation_epoch_end raised in the sanity check).
    import lightning.pytorch as pl

    after = []
    for framework, base in ((pl, pl.LightningModule), (tm, tm.Module)):
        tm.seed_everything(3)
        loader = DataLoader(random_classification(num_samples=8), batch_size=8)
        with pytest.raises(RuntimeError, match="validation failed"):
            quiet_trainer(framework=framework, max_epochs=1, default_root_dir=tmp_path).fit(
                draws_then_raises_in_validation(base), loader, loader
            )
        after.append(generator_states())
    assert after[0] == after[1]


def test_trained_weights_do_not_depend_on_num_sanity_val_steps():
    without = flat_weights(seeded_fit(num_sanity_val_steps=0))
    with_check = flat_weights(seeded_fit(num_sanity_val_steps=2))
    every_batch = flat_weights(seeded_fit(num_sanity_val_steps=-1))
    assert torch.equal(without, with_check) and torch.equal(without, every_batch)


def test_import_leaving_rng_gives_back_what_an_import_drew(tmp_path, monkeypatch):
    (tmp_path / "draws_on_import.py").write_text("import random\nDRAWN = random.random()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    start = generator_states()
    module = import_leaving_rng("draws_on_import")
    assert generator_states() == start and 0 <= module.DRAWN < 1
    assert import_leaving_rng("draws_on_import") is module  # imported once
    sys.modules.pop("draws_on_import")


# Lightning 2.6.6 ran this program (``lightning.pytorch`` for ``trainmesh``: LightningModule,
# Trainer, seed_everything; the same digits tensors) with num_sanity_val_steps 0 and 2 and the
# progress bar on and off: the same numbers in all four runs, and these are they.
LIGHTNING_DIGITS = {
    "val_acc": 0.6700251698493958,
    "weight_sum": 18.400533053421896,
    "first_weights": [-0.1177874356508255, -0.02239845134317875, -0.021992595866322517, 0.020974189043045044],
    "next_python": 0.154551400089043,
    "next_numpy": 0.9588017621528665,
    "next_torch": 0.8020921349525452,
}


def digits_program(num_sanity_val_steps: int, digits_file: str) -> dict:
    """Digits MLP with dropout, shuffled loaders, random draws in training and validation, the
    default progress bar, seeded once: what it trained and what each generator draws next."""
    rich_before_fit = any(name == "rich" or name.startswith("rich.") for name in sys.modules)
    features, y = torch.load(digits_file)
    x = features.float() / 16.0

    class Net(tm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 10)
            )

        training_step = DrawsInValidation.training_step

        def validation_step(self, batch, batch_idx):
            xb, yb = batch
            shift = torch.rand(1).item() * 0.0 + random.random() * 0.0 + float(np.random.rand()) * 0.0
            self.log("val_acc", (self.net(xb + shift).argmax(-1) == yb).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.2)

    tm.seed_everything(1234)
    model = Net()
    data = TensorDataset(x, y)
    train = DataLoader(torch.utils.data.Subset(data, range(0, 1400)), batch_size=64, shuffle=True)
    val = DataLoader(torch.utils.data.Subset(data, range(1400, 1797)), batch_size=64, shuffle=True)
    trainer = tm.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=num_sanity_val_steps,
    )
    trainer.fit(model, train, val)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "val_acc": float(trainer.callback_metrics["val_acc"]),
        "weight_sum": float(weights.double().sum()),
        "first_weights": [float(v) for v in weights[:4]],
        "next_python": random.random(),
        "next_numpy": float(np.random.rand()),
        "next_torch": float(torch.rand(1)),
        "rich_before_fit": rich_before_fit,
    }


@pytest.mark.parametrize("num_sanity_val_steps", [0, 2])
def test_a_seeded_digits_program_gives_lightnings_numbers(num_sanity_val_steps, tmp_path):
    # A process of its own, so that the progress bar's first import of rich happens inside this
    # fit; the digits come from a file, as sklearn imports rich. A fork of the fork server
    # (helpers/forked.py: torch and trainmesh imported, rich not) where there is one: the program
    # seeds itself after its imports, as in a new interpreter.
    from sklearn.datasets import load_digits

    digits = load_digits()
    torch.save((torch.tensor(digits.data), torch.tensor(digits.target)), tmp_path / "digits.pt")
    args = ["digits", str(num_sanity_val_steps), str(tmp_path / "digits.pt")]
    if can_fork():
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        result = run_forked(Path(__file__), args, env=env, timeout=300, cwd=tmp_path)
    else:
        result = run_program([__file__, *args], timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["rich_before_fit"] is False  # the fit's progress bar imports it first
    for key in ("val_acc", "weight_sum", "next_python", "next_numpy", "next_torch"):
        assert got[key] == pytest.approx(LIGHTNING_DIGITS[key], abs=1e-6), key
    assert got["first_weights"] == pytest.approx(LIGHTNING_DIGITS["first_weights"], abs=1e-6)


# Run in a fresh interpreter: in the test's own, whatever draws at import time was imported
# already. torch, NumPy and random are imported and seeded first, as a user's program does.
IMPORTS_PROGRAM = """
import json, random, sys
import numpy as np, torch

def states():
    name, keys, position, has_gauss, gauss = np.random.get_state()
    return random.getstate(), keys.tolist(), position, has_gauss, gauss, torch.get_rng_state().tolist()

def first_progress_bar():
    from trainmesh.callbacks.progress.drawing_bar import DrawingProgressBar, _make_progress
    _make_progress(DrawingProgressBar().console, transient=True)

def default_logger():
    import trainmesh
    trainer = trainmesh.Trainer(accelerator="cpu", devices=1, default_root_dir=sys.argv[1], enable_progress_bar=False)
    trainer.logger.log_metrics({"a": 1.0}, step=0)
    trainer.logger.log_hyperparams({"b": 2})
    trainer.logger.finalize("success")

def results_table():
    from trainmesh.trainer.results_table import print_results
    print_results("test", [{"acc": 1.0}])

steps = {
    "import trainmesh": lambda: __import__("trainmesh"),
    "import its packages": lambda: [__import__("trainmesh." + name) for name in ("callbacks", "loggers", "cli.main", "cli.lightning_cli")],
    "the progress bar's first use": first_progress_bar,
    "a results table": results_table,
    "the default logger": default_logger,
}
random.seed(3), np.random.seed(3), torch.manual_seed(3)
unchanged = {}
for name, step in steps.items():
    before = states()
    step()
    unchanged[name] = states() == before
print(json.dumps(unchanged))
"""


def test_trainmesh_imports_and_first_uses_draw_nothing(tmp_path):
    result = run_program(["-c", IMPORTS_PROGRAM, str(tmp_path)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    unchanged = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(unchanged) == 5 and all(unchanged.values()), unchanged


if __name__ == "__main__":
    print(json.dumps(digits_program(int(sys.argv[2]), sys.argv[3])))
