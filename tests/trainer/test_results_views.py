"""``trainer.callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` read by a callback at
every training and validation batch and epoch end, after ``fit``, and the CSVLogger's metrics.csv rows:
the same program run by Lightning 2.6 and by trainmesh and compared as data. Each view takes its
result collection's later entry (one per hook and name) of a key, as Lightning's; the step values
stay in the views as the next epoch starts, as Lightning's dicts keep them."""

from __future__ import annotations

import glob
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")


def _modules(base: Any) -> dict[str, Any]:
    class Net(base):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.count = torch.nn.Linear(4, 1), 0.0

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class EpochStart(Net):  # a name logged at epoch start for the bar and per step and epoch in the steps
        def on_train_epoch_start(self):
            self.count += 1
            self.log("x", 100.0 + self.count, prog_bar=True)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).sum()
            self.log("x", loss, prog_bar=True, on_step=True, on_epoch=True)
            return loss

    class OptimizerHooks(Net):  # one name logged by three hooks with other arguments: three metrics
        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).sum()
            self.log("shared", loss, prog_bar=True)
            return loss

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)
            self.log("shared", 10.0 + batch_idx, on_epoch=True)

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            optimizer.zero_grad()
            self.log("shared", 2.0 + batch_idx, on_step=False, on_epoch=True, reduce_fx="max")

        def on_before_optimizer_step(self, optimizer):
            self.log("before", 4.0, on_epoch=True, logger=False)

    class NotLogged(Net):  # step values for the bar only (logger=False)
        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).sum()
            self.log("hidden", loss, logger=False, prog_bar=True)
            self.log("hidden_both", loss, logger=False, on_epoch=True, prog_bar=True)
            return loss

    class ValidationStart(Net):  # names logged for the bar at validation's start and, not for it, in the steps
        def on_validation_epoch_start(self):
            self.count += 1
            self.log("v", 100.0 + self.count, prog_bar=True)
            self.log("w", 200.0 + self.count, prog_bar=True)

        def validation_step(self, batch, batch_idx):
            super().validation_step(batch, batch_idx)
            self.log("w", self.layer(batch).mean(), on_step=True)

    class StartHooks(Net):  # what the start hooks log, read at once (in the hook itself and the next ones)
        def _logged(self, hook, value):
            self.count += 1
            self.log(hook, value + self.count, prog_bar=True)
            self.seen.append((hook, self.views(self.trainer)))

        def on_train_start(self):
            self._logged("on_train_start", 50.0)

        def on_train_epoch_start(self):
            self._logged("on_train_epoch_start", 100.0)

        def on_validation_start(self):
            self._logged("on_validation_start", 200.0)

        def on_validation_epoch_start(self):
            self.seen.append(("before", self.views(self.trainer)))
            self._logged("on_validation_epoch_start", 300.0)

    return {
        "start_hooks": StartHooks,
        "epoch_start": EpochStart,
        "optimizer_hooks": OptimizerHooks,
        "not_logged": NotLogged,
        "validation_start": ValidationStart,
    }


def _run(framework: str, case: str, root: str) -> dict[str, Any]:
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import CSVLogger

        base = pl.LightningModule
    else:
        import trainmesh as pl
        from trainmesh.loggers import CSVLogger

        base = pl.Module
    seen: list[Any] = []

    def views(trainer: Any) -> tuple[dict[str, float], ...]:
        return tuple(
            {k: round(float(v), 5) for k, v in sorted(view.items())}
            for view in (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
        )

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append(("train_batch_start", views(trainer)))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(("train_batch_end", views(trainer)))

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            seen.append(("validation_batch_start", views(trainer)))

        def on_validation_epoch_end(self, trainer, module):
            seen.append(("validation_epoch_end", views(trainer)))

        def on_train_epoch_end(self, trainer, module):
            seen.append(("train_epoch_end", views(trainer)))

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=2,
        num_sanity_val_steps=1 if case == "start_hooks" else 0,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger(root),
        callbacks=[Spy()],
    )
    module = _modules(base)[case]()
    module.seen, module.views = seen, views
    trainer.fit(module, loader, loader)
    after = [views(trainer)]
    if case == "start_hooks":  # a validate() alone reads its start hooks' values at once too
        trainer.validate(module, loader, verbose=False)
        after.append(views(trainer))
    (csv,) = glob.glob(f"{root}/**/metrics.csv", recursive=True)
    with open(csv) as rows:
        return {"seen": seen, "after": after, "rows": rows.read()}


@pytest.mark.parametrize("case", ["start_hooks", "epoch_start", "optimizer_hooks", "not_logged", "validation_start"])
def test_the_three_views_and_the_rows_are_lightning_s(case, tmp_path):
    lightning = _run("lightning", case, str(tmp_path / "l"))
    ours = _run("trainmesh", case, str(tmp_path / "t"))
    if case == "epoch_start":  # the start hook's value is the bar's and the row's `x`; callback_metrics' the steps'
        assert lightning["after"][0][1]["x"] == lightning["after"][0][2]["x"] == 102.0 != lightning["after"][0][0]["x"]
    if case == "validation_start":  # the bar's `v` and `w` are the start hook's, callback_metrics' the steps'
        assert lightning["after"][0][2] == {"v": 102.0, "w": 202.0} != {k: lightning["after"][0][0][k] for k in "vw"}
    if case == "start_hooks":  # the sanity check's start hook reads its own value, a fit's validation does not,
        # validate() does
        assert lightning["seen"][0] == ("on_validation_start", ({"on_validation_start": 201.0},) * 3)
        reads = [
            views for hook, views in lightning["seen"] if hook == "on_validation_start"
        ]  # sanity, 2 epochs, validate
        assert "on_validation_start" not in reads[1][0] and reads[3][0]["on_validation_start"] == 210.0
    assert ours["rows"] == lightning["rows"]
    assert ours["after"] == lightning["after"]
    assert ours["seen"] == lightning["seen"]
