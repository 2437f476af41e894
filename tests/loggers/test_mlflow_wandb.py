"""``MLFlowLogger`` and ``WandbLogger`` (loggers/mlflow.py, loggers/wandb.py) against Lightning 2.6's:
the same program, logged through Lightning's logger and through trainmesh's, leaves the same metric
keys, steps and values in the store (read back with mlflow's client from a local file store, and from
W&B's offline run file), and the same hyperparameters. Comet, Neptune and LitLogger, whose packages
are not installed here, stop as Lightning's do (the same ModuleNotFoundError)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh import loggers as tm_loggers

pl = pytest.importorskip("lightning.pytorch")
pl_loggers = pytest.importorskip("lightning.pytorch.loggers")


def run(framework, logger):
    """A tiny model, 2 epochs of 4 steps, logging a step metric, an epoch metric and hyperparameters."""
    base, trainer_class, seed = framework

    class Net(base):
        def __init__(self, lr=0.1, width=4):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(width, 2)

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    seed(5)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)), 4)
    trainer = trainer_class(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=logger,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Net(), data, data)


LIGHTNING = (pl.LightningModule, pl.Trainer, pl.seed_everything)
TRAINMESH = (tm.Module, tm.Trainer, tm.seed_everything)


def mlflow_store(uri):
    """Every metric's (step, value) history and the params of the one run in the store at ``uri``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("parity")
    (found,) = client.search_runs([experiment.experiment_id])
    metrics = {
        key: [
            (m.step, m.value) for m in sorted(client.get_metric_history(found.info.run_id, key), key=lambda m: m.step)
        ]
        for key in found.data.metrics
    }
    return experiment.name, found.info.status, metrics, found.data.params


@pytest.fixture(scope="module")
def mlflow_stores(tmp_path_factory):
    """The same program's store through Lightning's MLFlowLogger ("pl") and trainmesh's ("tm")."""
    # mlflow 3 keeps its file store in maintenance and asks for this switch (sqlite needs
    # sqlalchemy, which mlflow-skinny does not install)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        stores = {}
        for name, framework, logger_class in [
            ("pl", LIGHTNING, pl_loggers.MLFlowLogger),
            ("tm", TRAINMESH, tm_loggers.MLFlowLogger),
        ]:
            uri = f"file:{tmp_path_factory.mktemp(name)}"
            run(framework, logger_class(experiment_name="parity", tracking_uri=uri))
            stores[name] = mlflow_store(uri)
    return stores


def test_mlflow_store_holds_what_lightnings_logger_writes(mlflow_stores):
    pl_store, tm_store = mlflow_stores["pl"], mlflow_stores["tm"]
    assert tm_store[:2] == pl_store[:2] == ("parity", "FINISHED")
    assert tm_store[2].keys() == pl_store[2].keys() >= {"train_loss_step", "train_loss_epoch", "val_loss", "epoch"}
    for key, history in pl_store[2].items():
        assert [v for _, v in tm_store[2][key]] == pytest.approx([v for _, v in history], rel=1e-6), key
    assert tm_store[3] == pl_store[3] == {"lr": "0.1", "width": "4"}


def test_mlflow_steps_are_lightnings(mlflow_stores):
    for key, history in mlflow_stores["pl"][2].items():
        assert [s for s, _ in mlflow_stores["tm"][2][key]] == [s for s, _ in history], key


def test_mlflow_logger_writes_calls_as_lightnings(tmp_path, monkeypatch):
    """The logger alone: the same calls (a prefix, a name MLflow cleans, a string it drops, nested
    hyperparameters) leave the same store."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    stores = {}
    for name, logger_class in [("pl", pl_loggers.MLFlowLogger), ("tm", tm_loggers.MLFlowLogger)]:
        uri = f"file:{tmp_path / name}"
        logger = logger_class(experiment_name="parity", tracking_uri=uri, prefix="fit", run_name="r1")
        logger.log_hyperparams({"opt": {"lr": 0.5, "betas": [0.9, 0.99]}, "name": "x" * 300})
        with pytest.warns(RuntimeWarning, match="Replacing"):
            logger.log_metrics({"loss": 1.5, "acc(%)": 50.0, "note": "skip"}, step=3)
        logger.log_metrics({"loss": 1.25}, step=None)
        logger.finalize("success")
        stores[name] = mlflow_store(uri)
    assert stores["tm"] == stores["pl"]


def wandb_records(path):
    """The records of a W&B run file: leveldb's log format (32 KiB blocks of chunks, each a 7-byte
    header: crc32, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4) after a 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    data, block, at, pending = path.read_bytes(), 32768, 7, b""
    while at + 7 <= len(data):
        if block - at % block < 7:  # too little left in this block for a header: the next block
            at += block - at % block
            continue
        length, kind = int.from_bytes(data[at + 4 : at + 6], "little"), data[at + 6]
        pending += data[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record
        elif kind == 0:
            break


def wandb_rows(root):
    """The history rows and the config of the one offline run under ``root``."""
    (path,) = root.glob("wandb/offline-run-*/run-*.wandb")
    rows, config = [], {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
        elif record.WhichOneof("record_type") == "config":
            config.update({item.key: item.value_json for item in record.config.update if not item.key.startswith("_")})
    return rows, config


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory):
    """The same program's offline run through Lightning's WandbLogger ("pl") and trainmesh's ("tm")."""
    import wandb

    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        for name, framework, logger_class in [
            ("pl", LIGHTNING, pl_loggers.WandbLogger),
            ("tm", TRAINMESH, tm_loggers.WandbLogger),
        ]:
            root = tmp_path_factory.mktemp(name)
            run(framework, logger_class(project="parity", save_dir=str(root), offline=True))
            wandb.finish()
            wandb.teardown()  # stops W&B's service, which writes the run file in the background: now complete
            out[name] = wandb_rows(root)
    return out


def test_wandb_offline_run_holds_what_lightnings_logger_writes(wandb_runs):
    (pl_rows, pl_config), (tm_rows, tm_config) = wandb_runs["pl"], wandb_runs["tm"]
    assert len(pl_rows) == 8  # 4 step rows, 2 validation rows, 2 epoch rows
    assert [sorted(r) for r in tm_rows] == [sorted(r) for r in pl_rows]
    for tm_row, pl_row in zip(tm_rows, pl_rows):
        values = {k: float(v) for k, v in tm_row.items() if k != "trainer/global_step"}
        assert values == pytest.approx({k: float(v) for k, v in pl_row.items() if k != "trainer/global_step"})
    assert tm_config == pl_config == {"lr": "0.1", "width": "4"}


def test_wandb_steps_are_lightnings(wandb_runs):
    steps = {name: [r["trainer/global_step"] for r in rows] for name, (rows, _) in wandb_runs.items()}
    assert steps["tm"] == steps["pl"]


@pytest.mark.parametrize("name", ["CometLogger", "LitLogger"])
def test_loggers_without_their_package_stop_as_lightnings_do(name):
    with pytest.raises(ModuleNotFoundError) as lightning_error:
        getattr(pl_loggers, name)()
    with pytest.raises(ModuleNotFoundError) as trainmesh_error:
        getattr(tm_loggers, name)()
    assert str(trainmesh_error.value) == str(lightning_error.value)
    with pytest.raises(ModuleNotFoundError, match="pip install -U 'neptune'"):
        tm_loggers.NeptuneLogger()  # pytorch-lightning 1.9.5's message (2.x has no NeptuneLogger)
