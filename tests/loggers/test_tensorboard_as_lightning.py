"""TensorBoardLogger's arguments as Lightning 2.6 defines them (``log_graph``, ``default_hp_metric``,
``prefix``, ``sub_dir``): the same program writes event files under Lightning and under trainmesh,
and what TensorBoard reads back from the two is compared (folders, scalar tags, steps and values,
the graph, the HPARAMS plugin)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("tensorboard")


def _run(framework, loggers, root: str) -> dict[str, object]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    class Model(framework.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)
            self.example_input_array = torch.zeros(2, 4)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    logger = loggers.TensorBoardLogger(root, name="m", log_graph=True, prefix="p", sub_dir="events")
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=logger,
        log_every_n_steps=4,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=8))
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    tags = events.Tags()
    return {
        "log_dir": os.path.relpath(logger.log_dir, root),
        "files": sorted(os.listdir(os.path.dirname(logger.log_dir))),
        "scalars": {t: [(e.step, round(e.value, 6)) for e in events.Scalars(t)] for t in tags["scalars"]},
        "graph": tags["graph"],
        "plugins": sorted(events.PluginTagToContent("hparams")),
    }


def test_tensorboard_logger_writes_what_lightning_s_writes(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.loggers as lightning_loggers

    import trainmesh
    import trainmesh.loggers as trainmesh_loggers

    expected = _run(lightning, lightning_loggers, str(tmp_path / "lightning"))
    assert expected["log_dir"] == os.path.join("m", "version_0", "events") and expected["graph"] is True
    assert "p-hp_metric" in expected["scalars"] and "p-train_loss" in expected["scalars"]
    assert _run(trainmesh, trainmesh_loggers, str(tmp_path / "trainmesh")) == expected


def _files_and_hparams(framework, root: str, *, saved: bool) -> tuple[list[str], dict[str, str]]:
    """A default Trainer (its logger is TensorBoard's): a module that logs nothing, with a tuple among
    its saved hyperparameters (``saved``) or none saved; the files it leaves (event files by kind)."""

    class Quiet(framework.LightningModule):
        def __init__(self, shape: tuple = (1, 2, 3)) -> None:
            super().__init__()
            if saved:
                self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", default_root_dir=root, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(Quiet(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, n), root) for n in names]
    texts = {p: open(os.path.join(root, p)).read() for p in found if p.endswith(".yaml")}
    return sorted(p.split("events.out.tfevents")[0] + "<events>" if "tfevents" in p else p for p in found), texts


def test_a_run_that_logs_nothing_leaves_lightning_s_files_and_hparams_yaml(tmp_path) -> None:
    """Lightning saves each logger at a run's start: TensorBoard's event file is made and its
    ``hparams.yaml`` written (``{}`` when nothing was saved), and a tuple is written as ``yaml.dump``
    writes it (``!!python/tuple``), or, where omegaconf is installed, as OmegaConf writes it (a list).
    trainmesh wrote neither file there, and a tuple always as a list."""
    lightning = pytest.importorskip("lightning.pytorch")
    as_tuple = "- 1\n- 2\n- 3\n" if importlib.util.find_spec("omegaconf") else "!!python/tuple\n- 1\n- 2\n- 3\n"

    import trainmesh

    for saved in (False, True):
        expected = _files_and_hparams(lightning, str(tmp_path / f"lightning{saved}"), saved=saved)
        assert "lightning_logs/version_0/<events>" in expected[0]
        assert expected[1]["lightning_logs/version_0/hparams.yaml"] == (
            "shape:" + ("\n" if as_tuple.startswith("-") else " ") + as_tuple if saved else "{}\n"
        )
        assert _files_and_hparams(trainmesh, str(tmp_path / f"trainmesh{saved}"), saved=saved) == expected


def _graph_through_batch_hooks(framework, loggers, root: str, with_datamodule: bool) -> dict[str, object]:
    """``log_graph=True`` with a uint8 ``example_input_array`` that the batch-transfer hooks make
    float (the Module's, or a DataModule's that overrides them): what each hook saw and the graph."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    calls: list[tuple[str, str, str]] = []

    def hooks_of(owner: str) -> dict[str, object]:
        def before(self, batch, dataloader_idx):
            calls.append((owner, "before", str(batch[0].dtype if isinstance(batch, list) else batch.dtype)))
            return batch

        def after(self, batch, dataloader_idx):
            calls.append((owner, "after", str(batch[0].dtype if isinstance(batch, list) else batch.dtype)))
            return [b.float() / 255 for b in batch] if isinstance(batch, list) else batch.float() / 255

        return {"on_before_batch_transfer": before, "on_after_batch_transfer": after}

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.example_input_array = torch.full((2, 4), 7, dtype=torch.uint8)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.randint(0, 255, (8, 4), dtype=torch.uint8)), batch_size=4)
    Data = type(
        "Data", (framework.LightningDataModule,), {**hooks_of("datamodule"), "train_dataloader": lambda s: loader}
    )
    if not with_datamodule:
        Model = type("HookedModel", (Model,), hooks_of("module"))
    logger = loggers.TensorBoardLogger(root, name="m", log_graph=True)
    trainer = framework.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(
        Model(), datamodule=Data() if with_datamodule else None, train_dataloaders=None if with_datamodule else loader
    )
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    return {"calls": calls, "graph": events.Tags()["graph"]}


@pytest.mark.parametrize("with_datamodule", [False, True], ids=["module_hooks", "datamodule_hooks"])
def test_log_graph_sends_the_example_through_the_batch_transfer_hooks(tmp_path, with_datamodule) -> None:
    """Found by the UvA normalizing-flows and ViT tutorials' ``trainer.logger._log_graph = True``:
    Lightning 2.6's log_graph passes ``example_input_array`` through on_before_batch_transfer,
    transfer_batch_to_device and on_after_batch_transfer (the DataModule's where it overrides them)
    before tracing; trainmesh traced the raw input, so a model whose hook makes it float failed."""
    lightning = pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.loggers as lightning_loggers

    import trainmesh
    import trainmesh.loggers as trainmesh_loggers

    expected = _graph_through_batch_hooks(lightning, lightning_loggers, str(tmp_path / "l"), with_datamodule)
    owner = "datamodule" if with_datamodule else "module"
    assert expected["calls"][:2] == [(owner, "before", "torch.uint8"), (owner, "after", "torch.uint8")]
    assert expected["graph"] is True
    assert _graph_through_batch_hooks(trainmesh, trainmesh_loggers, str(tmp_path / "t"), with_datamodule) == expected


def _nested_scalars(loggers, root: str) -> dict[str, list]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = loggers.TensorBoardLogger(root, name="m")
    logger.log_metrics({"training_step": {"train_loss": 0.5, "n": 2.0}, "val": 0.25}, step=3)
    logger.experiment.flush()
    scalars = {}
    for folder, _, names in os.walk(root):
        if any("tfevents" in n for n in names):
            events = EventAccumulator(folder)
            events.Reload()
            for tag in events.Tags()["scalars"]:
                key = f"{os.path.relpath(folder, root)}:{tag}"
                scalars[key] = [(e.step, e.value) for e in events.Scalars(tag)]
    return scalars


def test_a_nested_metric_goes_to_tensorboard_with_add_scalars_as_lightning_s(tmp_path) -> None:
    """A 1.x module's ``self.log(name, dict)`` reaches the loggers as a dict (``trainmesh.nested_metrics``):
    TensorBoard writes it with ``add_scalars`` (a folder per key), as 1.9.5's and 2.6's TensorBoardLogger."""
    pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.loggers as lightning_loggers

    import trainmesh.loggers as trainmesh_loggers

    expected = _nested_scalars(lightning_loggers, str(tmp_path / "lightning"))
    assert len(expected) == 3
    assert _nested_scalars(trainmesh_loggers, str(tmp_path / "trainmesh")) == expected
