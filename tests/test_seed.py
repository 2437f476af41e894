"""seed_everything: settings passed explicitly (never through the environment), DataLoader
workers seeded per worker, rank and epoch, the distributed sampler shuffled with the seed.

Run as a script (``python test_seed.py ddp OUT``), this file is the multi-process leg.
"""

import logging
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).parent))

import trainmesh as tm  # noqa: E402
from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.seed import SeedSettings, seed_settings, seed_worker  # noqa: E402


class NoisyIndices(Dataset):
    """Sample ``i`` is ``(i, noise)``: a random augmentation drawn where the sample is loaded
    (in a worker process), from torch, ``random`` and NumPy."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        noise = torch.rand(()).item() + random.random() + float(np.random.rand())
        return torch.tensor([float(index)]), torch.tensor([noise])


class RecordsBatches(tm.Module):
    """Keeps every batch its training_step saw; with ``out_dir``, each rank writes them there."""

    def __init__(self, out_dir: str | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.out_dir = out_dir
        self.seen: list[tuple[list[float], list[float]]] = []

    def training_step(self, batch, batch_idx):
        x, noise = batch
        self.seen.append((x.flatten().tolist(), noise.flatten().tolist()))
        return self.layer(x + noise).pow(2).mean()

    def on_train_end(self):
        if self.out_dir is not None:
            torch.save(self.seen, Path(self.out_dir) / f"rank{self.trainer.global_rank}.pt")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def noisy_loader(size: int = 16) -> DataLoader:
    return DataLoader(NoisyIndices(size), batch_size=4, shuffle=True, num_workers=2)


@pytest.fixture(autouse=True)
def _keep_seed_settings(monkeypatch):
    # These tests call seed_everything: later tests in this process get the settings back.
    import trainmesh.seed

    monkeypatch.setattr(trainmesh.seed, "_settings", trainmesh.seed._settings)


def _lightning_seed_everything():
    seed = pytest.importorskip("lightning.fabric.utilities.seed")
    return seed.seed_everything


SEED_VARIABLES = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")


def test_seed_everything_records_its_settings_and_writes_lightning_s_variables(monkeypatch):
    """As Lightning's, seed_everything writes PL_GLOBAL_SEED and PL_SEED_WORKERS (before l-misc60 trainmesh
    wrote none, a deliberate difference the session's brief undid); the settings are kept for the launchers."""
    for variable in SEED_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert tm.seed_everything(5, workers=True) == 5
    assert (os.environ["PL_GLOBAL_SEED"], os.environ["PL_SEED_WORKERS"]) == ("5", "1")
    assert seed_settings() == SeedSettings(seed=5, workers=True)
    tm.seed_everything(6)
    assert seed_settings() == SeedSettings(seed=6, workers=False)


def test_a_seed_is_taken_as_lightning_takes_it(monkeypatch):
    """None reads PL_GLOBAL_SEED (unset: 0, with a warning); a NumPy integer or a string of digits is
    taken (before: a ValueError for both, and None was 0 whatever the variable said)."""
    lightning_seed_everything = _lightning_seed_everything()
    monkeypatch.delenv("PL_SEED_WORKERS", raising=False)
    cases = [("99", None), (None, None), (None, np.int64(7)), (None, "8"), (None, 3.0)]
    found = {}
    for name, seed_everything in (("lightning", lightning_seed_everything), ("trainmesh", tm.seed_everything)):
        found[name] = []
        for variable, seed in cases:
            if variable is None:
                monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
            else:
                monkeypatch.setenv("PL_GLOBAL_SEED", variable)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                returned = seed_everything(seed)
            found[name].append((returned, random.random(), bool(caught)))
    assert found["trainmesh"] == found["lightning"]
    assert [case[0] for case in found["trainmesh"]] == [99, 0, 7, 8, 3]
    monkeypatch.setenv("PL_GLOBAL_SEED", "x")
    with pytest.raises(ValueError, match="PL_GLOBAL_SEED='x'"):
        tm.seed_everything()


def test_a_seed_without_a_number_after_a_seed_takes_it_again_as_lightning(monkeypatch):
    """Lightning's seed_everything(42) writes PL_GLOBAL_SEED, so a later seed_everything() (LightningCLI's
    default ``seed_everything: true`` after the program's own seed) is 42 again; a variable the program
    sets afterwards is read (l-progs17 p01: before, trainmesh's was 0 and the CLI's run trained from
    another initialisation, weights 1.11 away)."""
    lightning_seed_everything = _lightning_seed_everything()
    found = {}
    for name, seed_everything in (("lightning", lightning_seed_everything), ("trainmesh", tm.seed_everything)):
        monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seeds = [seed_everything(42), seed_everything(), seed_everything(None, workers=True)]
            monkeypatch.setenv("PL_GLOBAL_SEED", "9")
            seeds.append(seed_everything())
        found[name] = (seeds, random.random(), len(caught))
    assert found["trainmesh"] == found["lightning"]
    assert found["trainmesh"][0] == [42, 42, 42, 9]


def test_the_runtime_seeds_the_workers_of_training_and_evaluation_loaders_when_asked():
    runtime = tm.Runtime(accelerator="cpu", devices=1)
    users, without_workers = noisy_loader(), DataLoader(NoisyIndices(4), batch_size=2)

    def own_init(worker_id):
        pass

    with_own = DataLoader(NoisyIndices(4), batch_size=2, num_workers=2, worker_init_fn=own_init)
    tm.seed_everything(5, workers=True)
    for train in (True, False):
        prepared = runtime.setup_dataloaders(users, without_workers, with_own, train=train)
        init = prepared[0].loader.worker_init_fn
        assert init.func is seed_worker and init.keywords == {"rank": 0}
        assert prepared[1].loader.worker_init_fn is None  # no worker processes to seed
        assert prepared[2].loader.worker_init_fn is own_init  # the user's choice stands
    assert users.worker_init_fn is None  # the user's loader is left as it was
    tm.seed_everything(5)
    assert runtime.setup_dataloaders(users).loader.worker_init_fn is None


def test_the_runtime_takes_the_settings_it_was_built_with_where_seed_everything_never_ran(monkeypatch):
    tm.seed_everything(8, workers=True)
    runtime = tm.Runtime(accelerator="cpu", devices=1)
    assert runtime.seed_settings == SeedSettings(seed=8, workers=True)
    monkeypatch.setattr("trainmesh.seed._settings", None)  # as in a process ddp_spawn started
    init = runtime.setup_dataloaders(noisy_loader()).loader.worker_init_fn
    assert init.func is seed_worker and init.keywords == {"rank": 0}


def test_seed_worker_draws_lightning_s_numbers_for_the_base_seed_the_rank_and_the_worker():
    """Lightning 2.6's ``pl_worker_init_function`` in the same worker state: the same torch, random
    and NumPy draws (before: trainmesh's own mix of the seed, the rank and the worker)."""
    fabric_seed = pytest.importorskip("lightning.fabric.utilities.seed")

    def draws(init, base_seed: int, worker_id: int, rank: int) -> tuple[float, float, float]:
        torch.manual_seed(base_seed + worker_id)  # what torch does in a new worker
        init(worker_id, rank=rank)
        return torch.rand(()).item(), random.random(), float(np.random.rand())

    state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        cases = [(1000, 1, 0), (1000, 1, 1), (1000, 0, 0), (2000, 1, 0), (2**40 + 3, 3, 2)]
        ours = [draws(seed_worker, *case) for case in cases]
        assert ours == [draws(fabric_seed.pl_worker_init_function, *case) for case in cases]
        assert len(set(ours)) == len(cases)  # every base seed, rank and worker draws apart
    finally:
        torch.set_rng_state(state[0])
        random.setstate(state[1])
        np.random.set_state(state[2])


def test_a_seeded_fit_with_worker_augmentation_sees_lightning_s_batches(monkeypatch):
    """``seed_everything(42, workers=True)`` and a shuffled loader with 2 workers drawing an
    augmentation: the batches of a 2-epoch fit (indices and noise) are Lightning 2.6's."""
    pl = pytest.importorskip("lightning.pytorch")
    for variable in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):  # Lightning's seed_everything sets them: undone after
        monkeypatch.setenv(variable, "0")
    seen = {}
    for name, framework in (("lightning", pl), ("trainmesh", tm)):

        class Records(framework.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer, self.seen = torch.nn.Linear(1, 1), []

            training_step = RecordsBatches.training_step
            configure_optimizers = RecordsBatches.configure_optimizers

        framework.seed_everything(42, workers=True)
        model = Records()
        trainer = framework.Trainer(
            max_epochs=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, noisy_loader(8))
        seen[name] = model.seen
    assert seen["trainmesh"] == seen["lightning"]


def test_two_seeded_runs_with_worker_augmentation_see_the_same_batches():
    runs = []
    for _ in range(2):
        tm.seed_everything(11, workers=True)
        model = RecordsBatches()
        quiet_trainer(max_epochs=2).fit(model, noisy_loader())
        runs.append(model.seen)
    assert runs[0] == runs[1]
    epochs = runs[0][:4], runs[0][4:]
    noise = [sorted(n for _, batch in epoch for n in batch) for epoch in epochs]
    assert noise[0] != noise[1]  # new augmentations every epoch, not the same ones replayed


def test_ddp_processes_seed_their_workers_apart_and_shuffle_with_the_seed(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if can_fork():  # the program a fork of the fork server that imported torch and trainmesh once
        result = run_forked(Path(__file__), ["ddp", str(tmp_path)], env=env, timeout=240)
    else:
        command = [sys.executable, __file__, "ddp", str(tmp_path)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    # The two shards are halves of the permutation DistributedSampler draws from seed 7, epoch 0.
    permutation = torch.randperm(16, generator=torch.Generator().manual_seed(7)).tolist()
    seen = [[int(i) for indices, _ in batches for i in indices] for batches in ranks]
    assert seen == [permutation[0::2], permutation[1::2]]
    # Each rank's workers draw their own augmentations (torch alone gives both ranks the same).
    noise = [[n for _, values in batches for n in values] for batches in ranks]
    assert all(a != b for a, b in zip(*noise))


def _ddp_leg(out_dir: str) -> None:
    tm.seed_everything(7, workers=True)
    # Forked processes start with this one's generators, so torch alone would give both ranks'
    # workers the same seeds. (Spawned ones start unseeded: see the launcher.)
    trainer = quiet_trainer(strategy="ddp_fork", devices=2, max_epochs=1)
    trainer.fit(RecordsBatches(out_dir), noisy_loader())


SAMPLER_SEED_CASES = [  # (PL_GLOBAL_SEED before seed_everything(17), what the program does to it after)
    (None, None),
    ("3", None),
    (None, "5"),
    ("3", "5"),
    ("3", "remove"),
]


def _each_case_under_both(monkeypatch, draw=lambda: None):
    """For each of SAMPLER_SEED_CASES, under Lightning's seed_everything and then trainmesh's: the variable as the
    program had it, seed_everything(17), the program's ``draw``, then what the program does to the variable; yields
    "lightning" or "trainmesh" with the process in that state."""
    for before, after in SAMPLER_SEED_CASES:
        for name, seed_everything in (("lightning", _lightning_seed_everything()), ("trainmesh", tm.seed_everything)):
            monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
            if before is not None:
                monkeypatch.setenv("PL_GLOBAL_SEED", before)
            seed_everything(17)
            draw()
            if after == "remove":
                monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
            elif after is not None:
                monkeypatch.setenv("PL_GLOBAL_SEED", after)
            yield name


def test_the_sampler_seed_follows_a_program_that_changes_the_variable_as_lightning(monkeypatch):
    """Lightning's distributed sampler reads PL_GLOBAL_SEED as it is when the sampler is made: a program
    that sets or removes it after seed_everything(17) shuffles with its number, or 0 (review-s58a: before,
    trainmesh's shuffled with 17 in both, another data order)."""
    from lightning.pytorch.trainer.connectors.data_connector import _get_distributed_sampler

    import trainmesh.runtime

    loader = DataLoader(range(8), batch_size=2)
    given = []
    monkeypatch.setattr(trainmesh.runtime, "process_dataloader", lambda strategy, loader, **o: given.append(o["seed"]))
    runtime = tm.Runtime()
    found = {"lightning": [], "trainmesh": []}
    for name in _each_case_under_both(monkeypatch):
        if name == "lightning":
            sampler = _get_distributed_sampler(loader, True, 0, "fit", num_replicas=2, rank=0)
            found[name].append(sampler.seed)
        else:
            runtime.setup_dataloaders(loader)
            found[name].append(given.pop())
    assert found["trainmesh"] == found["lightning"] == [17, 17, 5, 5, 0]


def test_a_run_reseeds_from_the_variable_a_program_changed_as_lightning(monkeypatch):
    """Lightning's ddp/fsdp set-up calls reset_seed(), which reads PL_GLOBAL_SEED: after seed_everything(17)
    and a draw, a program that set it to 5 trains from 5, one that removed it is not reseeded
    (review-s58a: before, trainmesh's reseeded with 17 in both: other random numbers from there)."""
    from types import SimpleNamespace

    from lightning.fabric.utilities.seed import reset_seed

    from trainmesh.runtime_port import TrainerPort

    host = SimpleNamespace(strategy=SimpleNamespace(capabilities=SimpleNamespace(reseeds_each_run=True)))
    port = TrainerPort(host)  # type: ignore[arg-type]
    found = {"lightning": [], "trainmesh": []}
    for name in _each_case_under_both(monkeypatch, draw=lambda: torch.rand(3)):  # the program's draws before its run
        host.seed_settings = seed_settings()  # the Runtime's, captured when it was built
        reset_seed() if name == "lightning" else port.reseed_for_run()
        found[name].append(torch.rand(1).item())
    assert found["trainmesh"] == found["lightning"]
    assert found["trainmesh"][4] != found["trainmesh"][1]  # removed: no reseed


if __name__ == "__main__":
    assert sys.argv[1] == "ddp"
    _ddp_leg(sys.argv[2])


@pytest.mark.parametrize("environment", [{}, {"LOCAL_RANK": "1"}, {"RANK": "0", "LOCAL_RANK": "1"}])
def test_seed_set_names_the_rank_a_launcher_gave_as_lightning(monkeypatch, caplog, environment):
    # Lightning prefixes "Seed set to N" with "[rank: N] " (its _get_rank: RANK, then LOCAL_RANK, ...) in a
    # process a launcher started, as trainmesh's workers are
    lightning_seed = pytest.importorskip("lightning.fabric.utilities.seed")
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level("INFO"):
        lightning_seed.seed_everything(3)
        tm.seed_everything(3)
    theirs, ours = (r.getMessage() for r in caplog.records if "Seed set" in r.getMessage())
    assert ours == theirs


@pytest.mark.parametrize(
    "name", ["lightning.fabric", "lightning.fabric.utilities.seed", "lightning.pytorch", "lightning"]
)
def test_a_programs_level_on_lightning_s_loggers_governs_seed_set_as_lightning(caplog, name):
    # Lightning logs "Seed set to N" from lightning.fabric.utilities.seed: WARNING on lightning.fabric (or that
    # module's logger) silences it, on lightning.pytorch or lightning (lightning.fabric stays INFO) it does not
    lightning_seed = pytest.importorskip("lightning.fabric.utilities.seed")
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with caplog.at_level("INFO"):
            lightning_seed.seed_everything(3)
            theirs = [r.getMessage() for r in caplog.records if "Seed set" in r.getMessage()]
            caplog.clear()
            tm.seed_everything(3)
            ours = [r.getMessage() for r in caplog.records if "Seed set" in r.getMessage()]
    finally:
        logger.setLevel(level)
    assert ours == theirs


def test_seed_everything_writes_pl_global_seed_and_pl_seed_workers_as_lightning():
    # a program reading os.environ["PL_GLOBAL_SEED"] after seed_everything (before: KeyError under trainmesh)
    lightning_seed = pytest.importorskip("lightning.fabric.utilities.seed")

    def environment_after(seed_everything):
        os.environ.pop("PL_GLOBAL_SEED", None)
        os.environ.pop("PL_SEED_WORKERS", None)
        seen = []
        for seed, workers in [(17, False), (17, True), (None, False), (None, True)]:
            returned = seed_everything(seed, workers=workers, verbose=False)
            seen.append((returned, os.environ.get("PL_GLOBAL_SEED"), os.environ.get("PL_SEED_WORKERS")))
        os.environ["PL_GLOBAL_SEED"] = "5"  # the program's own value: read by a call without a seed
        seen.append((seed_everything(verbose=False), os.environ["PL_GLOBAL_SEED"], os.environ["PL_SEED_WORKERS"]))
        return seen

    theirs = environment_after(lightning_seed.seed_everything)
    assert theirs[0] == (17, "17", "0") and theirs[-1] == (5, "5", "0")
    assert environment_after(tm.seed_everything) == theirs
