"""The seeds' dp and ddp2 modes, *_step_end / *_epoch_end hooks, and configure_ddp."""

import pytest
import torch
import torch.nn.functional as F
import torchmetrics
from ddp_run import Net, dataset
from legs import SCRIPT, run
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.lightning_order import GlobalBatches
from helpers.models import TutorialModule, quiet_trainer
from trainmesh.data import DigitsDataModule


class SeedDPModuleExample1(TutorialModule):
    """The seed tutorial's DP Example 1 (001_*), with torchmetrics' current Accuracy call."""

    def __init__(self):
        super().__init__(learning_rate=1e-3)
        self.val_accuracy = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.step_end_batches = []

    def validation_step(self, batch, batch_idx):
        x, y = batch
        # total batch size = 16, 2 devices -> each sees a batch of at most 8
        assert x.shape[0] <= 8
        prob = F.softmax(self(x), dim=1)
        return torch.argmax(prob, dim=1), y

    def validation_step_end(self, outputs):
        pred, y = outputs
        self.step_end_batches.append(pred.shape[0])
        self.log("val_acc", self.val_accuracy(pred, y), prog_bar=True)


class SeedDPModuleExample2(TutorialModule):
    """The seed tutorial's DP Example 2: a custom reduction and training_epoch_end."""

    def __init__(self):
        super().__init__(learning_rate=1e-3)
        self.all_predictions = None

    def training_step_end(self, outputs):
        losses = outputs["loss"]
        assert losses.shape[0] == 2
        y_hats = outputs["y_hat"]
        assert y_hats.shape[0] == 2 * 8
        preds = torch.argmax(F.softmax(y_hats, dim=1), dim=1)
        return {"loss": torch.mean(losses), "pred": preds}

    def training_epoch_end(self, outputs):
        self.all_predictions = torch.cat([out["pred"] for out in outputs])


def test_seed_dp_example_1_validation_step_end_sees_the_whole_batch():
    tm.seed_everything(1)
    model = SeedDPModuleExample1()
    dm = DigitsDataModule(batch_size=16)
    trainer = quiet_trainer(accelerator="cpu", devices=2, strategy="dp", max_epochs=1)
    trainer.fit(model, datamodule=dm)
    assert set(model.step_end_batches) == {16, len(dm.val_set) % 16}  # whole batches, last one smaller
    assert 0.0 <= trainer.callback_metrics["val_acc"] <= 1.0


def test_seed_dp_example_2_custom_reduction_and_epoch_end():
    model = SeedDPModuleExample2()
    trainer = quiet_trainer(accelerator="cpu", devices=2, strategy="dp", max_steps=4, limit_val_batches=0)
    trainer.fit(model, datamodule=DigitsDataModule(batch_size=16))
    assert trainer.global_step == 4
    # max_steps ended the epoch early; training_epoch_end still got the 4 steps' outputs.
    assert model.all_predictions.shape == (64,)


def test_seed_example_2_under_the_seeds_own_spelling_fails_clearly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=r"no CUDA device is visible.*accelerator='cpu', devices=2, strategy='dp'"):
        tm.Trainer(gpus=2, accelerator="dp", max_steps=4, weights_summary=None, limit_val_batches=0)


def test_dp_matches_the_handwritten_ddp_loop(handwritten):
    model = Net()
    trainer = quiet_trainer(accelerator="cpu", devices=2, strategy="dp", max_epochs=2)
    # The global batch of 2 x 16: at step k the hand-written ranks' k-th batches (shuffled, seed 0)
    order = GlobalBatches(len(dataset()), world=2, batch_size=16)
    trainer.fit(model, DataLoader(dataset(), batch_size=32, sampler=order))
    total = sum(float(t.double().sum()) for t in model.state_dict().values())
    reference = sum(float(t.double().sum()) for t in handwritten.values())
    assert abs(total - reference) <= 1e-5
    assert trainer.global_step == 16


def test_dp_loss_without_step_end_is_the_mean_of_the_device_losses():
    class Probe(Net):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.chunk_sizes = getattr(self, "chunk_sizes", []) + [batch[0].shape[0]]
            return loss

    model = Probe()
    trainer = quiet_trainer(accelerator="cpu", devices=3, strategy="dp", max_steps=1)
    trainer.fit(model, DataLoader(dataset(10), batch_size=10))
    assert model.chunk_sizes == [4, 4, 2]  # as torch.chunk / DataParallel's scatter split 10 over 3


def test_ddp2_on_two_torchrun_nodes_matches_the_handwritten_ddp_loop(torchrun_nodes, handwritten):
    saved = torch.load(torchrun_nodes("ddp2"))  # after conftest's ddp fit, in its process group
    assert saved["world_size"] == 2  # one process per node
    assert saved["node_batches"] == 16  # training_step_end saw each node's batch, one loss per device
    total = sum(float(t.double().sum()) for t in saved["state_dict"].values())
    reference = sum(float(t.double().sum()) for t in handwritten.values())
    assert abs(total - reference) <= 1e-5


def test_configure_ddp_is_honoured(tmp_path):
    out = tmp_path / "own.pt"
    # Forks in one process group (how the processes start is not what this checks).
    result = run(str(SCRIPT), "trainer", str(out), "ddp", "2", env={"MODEL": "own_ddp"}, forked=True, world=2)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(out)
    assert saved["wrapper"] == "CustomDDP" and saved["find_unused"] is True


@pytest.mark.parametrize("strategy", ["auto", "dp"])
def test_step_end_and_epoch_end_hooks_run_under_every_strategy(strategy):
    class Hooks(Net):
        def __init__(self):
            super().__init__()
            self.seen = {"training_step_end": 0, "validation_step_end": 0, "test_step_end": 0}

        def training_step_end(self, output):
            self.seen["training_step_end"] += 1
            return output.mean()

        def validation_step_end(self, output):
            self.seen["validation_step_end"] += 1
            return output

        def test_step(self, batch, batch_idx):
            return self.net(batch[0]).argmax(1)

        def test_step_end(self, output):
            self.seen["test_step_end"] += 1
            return output

        def validation_epoch_end(self, outputs):
            self.validation_outputs = len(outputs)

        def test_epoch_end(self, outputs):
            self.log("test_predictions", float(torch.cat(outputs).numel()))

    devices = 2 if strategy == "dp" else 1
    model = Hooks()
    trainer = quiet_trainer(strategy=strategy, devices=devices, max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(dataset(64), batch_size=16), DataLoader(dataset(32), batch_size=8))
    (result,) = trainer.test(model, DataLoader(dataset(40), batch_size=8), verbose=False)
    assert model.seen == {"training_step_end": 4, "validation_step_end": 4, "test_step_end": 5}
    assert (
        model.validation_outputs == 0
    )  # the steps return None: 1.9.5 keeps no None output (test_lightning1_deprecations.py)
    assert result["test_predictions"] == 40.0


def test_step_outputs_are_not_kept_without_an_epoch_end_hook():
    trainer = quiet_trainer(max_epochs=1)

    class Watch(tm.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            assert trainer.loop.epoch_outputs == []

    trainer.callbacks.append(Watch())
    trainer.fit(Net(), DataLoader(dataset(64), batch_size=16))


def test_dp_logs_inside_step_are_weighted_by_each_chunk():
    class LogsInStep(Net):
        def training_step(self, batch, batch_idx):
            self.log("n", float(batch[0].shape[0]))  # 8 and 8 -> the step value is the batch's mean
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_x", x[:, 0].mean())

    data = dataset(20)
    model = LogsInStep()
    trainer = quiet_trainer(
        accelerator="cpu", devices=2, strategy="dp", max_steps=1, num_sanity_val_steps=0, val_check_interval=1
    )
    trainer.fit(model, DataLoader(dataset(64), batch_size=16), DataLoader(data, batch_size=3))  # chunks 2 + 1
    assert trainer.callback_metrics["n"] == 8.0
    assert trainer.callback_metrics["val_x"] == pytest.approx(float(data.tensors[0][:, 0].double().mean()), abs=1e-6)
