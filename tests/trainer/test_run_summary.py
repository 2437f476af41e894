"""The start line: each stage says on what it runs (strategy, processes, mesh, batch)."""

import logging
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import DropoutNet, loaders, quiet_trainer
from trainmesh.strategies.sampling import shard_dataloader
from trainmesh.trainer.run_summary import format_run_summary, loader_batch_size


def test_format_multiplies_batch_by_data_parallel_size_and_accumulation():
    line = format_run_summary(
        stage="fit",
        strategy="ddp",
        processes=8,
        nodes=2,
        mesh_sizes={"pp": 2, "dp_shard": 4},
        device="cuda",
        precision="bf16-mixed",
        batch_size=16,
        dp_size=4,
        accumulation=2,
    )
    assert line == (
        "trainmesh fit: strategy ddp, 8 processes (4 per node x 2 nodes), mesh pp=2 x dp_shard=4, "
        "device cuda, precision bf16-mixed, global batch 128 (16 per rank x 4 data-parallel x 2 accumulated)"
    )


def test_format_says_how_many_shard_units_fsdp_chose():
    line = format_run_summary(
        stage="fit",
        strategy="fsdp",
        processes=2,
        nodes=1,
        mesh_sizes={"dp_shard": 2},
        device="cpu",
        precision="32-true",
        batch_size=4,
        dp_size=2,
        shard_units=11,
    )
    assert line.startswith("trainmesh fit: strategy fsdp (11 shard units), 2 processes"), line
    one = format_run_summary(
        stage="fit",
        strategy="fsdp",
        processes=2,
        nodes=1,
        mesh_sizes={"dp_shard": 2},
        device="cpu",
        precision="32-true",
        batch_size=4,
        dp_size=2,
        shard_units=1,
    )
    assert "strategy fsdp (1 shard unit), " in one  # every parameter gathered at once: worth seeing


def test_format_one_process_and_unknown_batch():
    line = format_run_summary(
        stage="predict",
        strategy="single",
        processes=1,
        nodes=1,
        mesh_sizes={},
        device="cpu",
        precision="32-true",
        batch_size=None,
        dp_size=1,
    )
    assert line == (
        "trainmesh predict: strategy single, 1 process, mesh none, device cpu, precision 32-true, "
        "batch size unknown (1 data-parallel x 1 accumulated)"
    )


def test_loader_batch_size_reads_batch_sampler_and_gives_up_on_plain_iterables():
    data = TensorDataset(torch.zeros(10, 2))
    assert loader_batch_size(DataLoader(data, batch_size=5)) == 5
    sampler = torch.utils.data.BatchSampler(range(10), batch_size=3, drop_last=False)
    assert loader_batch_size(DataLoader(data, batch_sampler=sampler)) == 3
    assert loader_batch_size([torch.zeros(2)]) is None
    # The Runtime's and the strategies' wrappers keep the loader they wrap as .loader.
    wrapped = SimpleNamespace(loader=SimpleNamespace(loader=DataLoader(data, batch_size=4)))
    assert loader_batch_size(wrapped) == 4
    # An evaluation shard: batch_size None, its batch sampler the loader's batch size over the share.
    shard = shard_dataloader(DataLoader(data, batch_size=3), dp_rank=0, dp_size=2, train=False, seed=0)
    assert loader_batch_size(shard) == 3


def test_every_stage_logs_its_line_once_and_summary_off_silences_it(capsys, caplog):
    # Logged (stderr), as Lightning's lines about the run it starts ("GPU available: ..."), not printed
    caplog.set_level(logging.INFO, logger="trainmesh")
    train, val = loaders(batch_size=8)
    trainer = quiet_trainer(
        max_steps=2, limit_val_batches=1, num_sanity_val_steps=0, accumulate_grad_batches=2, enable_model_summary=True
    )
    model = DropoutNet()
    trainer.fit(model, train, val)
    trainer.validate(model, val, verbose=False)
    assert "trainmesh fit" not in capsys.readouterr().out
    out = "\n".join(caplog.messages)
    caplog.clear()
    assert (
        out.count(
            "trainmesh fit: strategy single, 1 process, mesh none, device cpu, precision 32-true, "
            "global batch 16 (8 per rank x 1 data-parallel x 2 accumulated)"
        )
        == 1
    ), out
    # Validation inside fit is part of fit: only trainer.validate() announces "validate".
    assert out.count("trainmesh validate: ") == 1 and "global batch 8 (8 per rank" in out, out

    quiet_trainer(max_steps=1, limit_val_batches=0).fit(DropoutNet(), train)
    assert "trainmesh " not in "\n".join(caplog.messages) + capsys.readouterr().out
