"""Lightning 2.6's Trainer members under ddp at 2 processes, against Lightning's own ddp run.

One launch per framework (tests/helpers/trainer_members_ddp.py, in conftest.py's shared ``lightning_ddp``
launch: Lightning's ``strategy="ddp"`` starts the script again as the second process) runs three cases, and each
rank's record is compared with the same rank's under Lightning:

- ``use_distributed_sampler=False`` (each process reads the whole loader as the program made it),
  and with the program's own ``DistributedSampler``: every record (what the callback read at each
  hook, the samples of every training step) and the weights, bit for bit;
- the default sampler, with a OneCycleLR sized by ``estimated_stepping_batches`` (4 per process:
  8 batches split over 2 processes), accumulation, fit and test: what the callback read at setup
  (``num_devices``, ``device_ids``, ``distributed_sampler_kwargs``, ``node_rank``, ...), at each
  batch (``is_last_batch``), ``estimated_stepping_batches``, ``enable_validation``, the loaders'
  lengths, ``is_shared_filesystem`` (True for a folder both ranks see, False for one per rank), and
  ``trainer.strategy``'s ``distributed_sampler_kwargs``, ``parallel_devices``, ``process_group_backend``,
  ``lightning_module`` (before: AttributeError, and None for the backend), its ``cluster_environment``
  (``.global_rank()``, ``.world_size()``, ...), ``checkpoint_io``, ``precision_plugin``, ``model`` (the
  DDP-wrapped module), ``_timeout`` (before: AttributeError), and
  the samples of every training step (both shuffle the ``shuffle=False`` loader alike:
  test_lightning_sampler_ddp.py). Not the loaders' samplers and types: Lightning re-makes each
  ``DataLoader(sampler=DistributedSampler)``, trainmesh's hold a ``BatchSampler`` over one (the
  samples they give are Lightning's: test_evaluation_shares.py).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow
PROGRAM = "trainer_members_ddp"  # helpers/trainer_members_ddp.py, in conftest.py's lightning_ddp launch


@pytest.fixture(scope="module")
def records(lightning_ddp):
    """Lightning's run and trainmesh's (conftest.py's ``lightning_ddp``, one launch a framework shared
    with four other files). Lightning's rank 0 is a fork of the fork server (its ddp starts the second
    process as a new interpreter, as its owners define it); trainmesh's runs on 2 forks of the fork
    server in one process group (helpers/forked.py), which its Trainer finds started, as torchrun's: 2
    interpreters fewer, each importing torch and trainmesh (this test is about what the Trainer
    reports, not process start)."""
    return lightning_ddp


def _load(out, framework, case, rank):
    return torch.load(out / framework / PROGRAM / f"{framework}-{case}-rank{rank}.pt", weights_only=False)


def _weights_equal(ours, theirs):
    return all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in theirs["weights"])


@pytest.mark.parametrize("case", ["no_distributed_sampler", "own_sampler"])
@pytest.mark.parametrize("rank", [0, 1])
def test_use_distributed_sampler_false_reads_as_lightning(records, case, rank):
    theirs, ours = _load(records, "lightning", case, rank), _load(records, "trainmesh", case, rank)
    assert ours["events"] == theirs["events"]
    assert _weights_equal(ours, theirs)
    if case == "own_sampler":  # a module's `_ddp_params_and_buffers_to_ignore` stays per rank (before: synced)
        assert (
            set(ours["weights"])
            == set(theirs["weights"])
            == {"layer.weight", "layer.bias", "local.weight", "local.bias", "seen"}
        )


def test_params_kept_out_of_ddp_differ_by_rank_as_lightning(records):
    theirs = [_load(records, "lightning", "own_sampler", rank)["weights"] for rank in (0, 1)]
    assert torch.equal(theirs[0]["layer.weight"], theirs[1]["layer.weight"])
    assert not torch.equal(theirs[0]["local.weight"], theirs[1]["local.weight"])
    assert not torch.equal(theirs[0]["seen"], theirs[1]["seen"])


def _without_samples(events):
    """The record less the loaders' types and samplers (Lightning re-makes its DataLoaders)."""
    kept = []
    for event in events:
        if event[0] == "on_train_start":
            kept.append((event[0], event[1], event[2][1], event[3][1], *event[4:]))
        elif event[0] in ("on_validation_start", "on_test_start"):
            kept.append((event[0], event[1][1]))
        elif event[0] == "after":
            kept.append((event[0], event[1], None if event[2] is None else event[2][1]))
        else:
            kept.append(event)
    return kept


@pytest.mark.parametrize("rank", [0, 1])
def test_members_under_ddp_read_as_lightning(records, rank):
    theirs = _load(records, "lightning", "fit_test_onecycle", rank)
    ours = _load(records, "trainmesh", "fit_test_onecycle", rank)
    assert _without_samples(ours["events"]) == _without_samples(theirs["events"])
    setup = next(e for e in theirs["events"] if e[0] == "setup")[2]
    assert setup["distributed_sampler_kwargs"] == {"num_replicas": 2, "rank": rank}
    assert ("is_shared_filesystem", True, False) in theirs["events"]
    strategy = {"distributed_sampler_kwargs": {"num_replicas": 2, "rank": rank}, "parallel_devices": ["cpu", "cpu"]}
    assert (
        "strategy",
        {**strategy, "process_group_backend": "gloo", "lightning_module": "Net", "num_processes": 2},
    ) in theirs["events"]
    assert ("configure_optimizers", 4) in theirs["events"]
    plugins = next(e for e in theirs["events"] if e[0] == "strategy_plugins")[1]
    assert plugins["cluster_environment"] == "LightningEnvironment" and plugins["places"] == (rank, 2, rank, 0)
    assert plugins["model"] == "DistributedDataParallel" and plugins["checkpoint_io"] == "TorchCheckpointIO"


def _logger_files(root):
    """Each file the loggers wrote under ``root`` (an event file's name is the host's and the time's:
    counted as ``events``), with the text of every one but the event files."""
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parts[len(root.parts)] in ("csv", "tb"):
            name = path.relative_to(root).as_posix()
            if path.name.startswith("events.out.tfevents"):
                name = f"{path.parent.relative_to(root).as_posix()}/events"
                files[name] = files.get(name, 0) + 1
            else:
                files[name] = path.read_text()
    return files


def test_logger_calls_and_files_under_ddp_as_lightning(records):
    """A program's own Logger (no ``@rank_zero_only``) is called on each rank where Lightning calls it
    (before: rank 1 got no call), and trainmesh's CSVLogger and TensorBoardLogger write what Lightning's
    write, once (rank 0: fit's event file and test's), whereas the Trainer calls them on every rank too."""
    for rank in (0, 1):
        theirs = _load(records, "lightning", "fit_test_onecycle", rank)["events"]
        ours = _load(records, "trainmesh", "fit_test_onecycle", rank)["events"]
        calls = ("log_metrics", "log_hyperparams", "log_graph", "save", "finalize")
        assert [e for e in ours if e[0] in calls] == [e for e in theirs if e[0] in calls]
        assert ("finalize", "success") in theirs and any(e[0] == "log_metrics" for e in theirs)
    theirs = _logger_files(records / "lightning" / PROGRAM / "lightning" / "fit_test_onecycle")
    assert theirs["tb/version_0/events"] == 2 and "csv/version_0/metrics.csv" in theirs
    assert _logger_files(records / "trainmesh" / PROGRAM / "trainmesh" / "fit_test_onecycle") == theirs
