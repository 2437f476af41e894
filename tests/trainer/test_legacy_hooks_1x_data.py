"""More Lightning 1.x hooks, called where 1.x called them with one deprecation line each
(trainer/lightning1/legacy_hooks.py), or refused with the reason (trainer/unsupported_hooks.py).

Where 1.x called them, read from pytorch-lightning 1.6.5 (1.5.10 agrees):
- ``on_{train,val,test,predict}_dataloader()``: ``trainer/connectors/data_connector.py``
  ``_request_dataloader`` calls the LightningModule's hook just before ``source.dataloader()``, for
  a loader passed as an argument too (the source is then the argument); a data module's is never
  called.
- A callback's ``on_save_checkpoint`` returning a value: ``trainer/trainer.py``
  ``_call_callbacks_on_save_checkpoint`` stores it as ``checkpoint["callbacks"][state_key]`` (over
  the ``state_dict()``); ``_call_callbacks_on_load_checkpoint`` passes a deep copy of that state,
  not the checkpoint, to ``on_load_checkpoint(trainer, pl_module, callback_state)``.
- ``add_to_queue(queue)`` on rank 0 after the stage and ``get_from_queue(queue)`` in the launching
  process (``strategies/launchers/spawn.py``, ``_FakeQueue``): ddp_spawn only.
- ``truncated_bptt_steps`` / ``tbptt_split_batch``: run as 1.9.5 ran them (test_tbptt.py).
"""

import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer
from helpers.processes import run_program


def _loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.calls = []

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        pass

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _recorder(name):
    def hook(self):
        self.calls.append(name)

    return hook


def _recording(*names):
    return {name: _recorder(name) for name in names}


DATALOADER_HOOKS = ("on_train_dataloader", "on_val_dataloader", "on_test_dataloader", "on_predict_dataloader")
LOADERS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


def test_the_1x_dataloader_hooks_run_just_before_their_stages_loader_is_requested():
    def loader_method(name):
        def method(self):
            self.calls.append(name)
            return _loader()

        return method

    Legacy = type("Legacy", (Net,), {**_recording(*DATALOADER_HOOKS), **{n: loader_method(n) for n in LOADERS}})
    module = Legacy()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0)
    with pytest.warns(FutureWarning) as caught:
        trainer.fit(module)
    deprecations = [str(w.message) for w in caught if "on_train_dataloader is a Lightning 1.x hook" in str(w.message)]
    assert len(deprecations) == 1 and "train_dataloader()" in deprecations[0]
    trainer.validate(module)
    trainer.test(module)
    trainer.predict(module)
    assert module.calls == [
        "on_train_dataloader",
        "train_dataloader",
        "on_val_dataloader",
        "val_dataloader",
        "on_val_dataloader",
        "val_dataloader",
        "on_test_dataloader",
        "test_dataloader",
        "on_predict_dataloader",
        "predict_dataloader",
    ]
    # A loader passed as an argument: the hook still runs first, as 1.x's _request_dataloader did.
    module = type("Args", (Net,), _recording(*DATALOADER_HOOKS))()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        quiet_trainer(max_epochs=1).fit(module, _loader(), _loader())
    # The sanity check asks for the validation loaders before the train loader is asked for
    # (Lightning's order: tests/trainer/test_fit_loop_reads.py).
    assert module.calls == ["on_val_dataloader", "on_train_dataloader"]


def test_a_data_modules_1x_dataloader_hook_is_named_as_not_called():
    class Data(tm.DataModule):
        def train_dataloader(self):
            return _loader()

        def on_train_dataloader(self):
            raise AssertionError("1.x never called a data module's on_train_dataloader")

    with pytest.warns(UserWarning, match=r"Data\.on_train_dataloader is not called: .*LightningModule only"):
        quiet_trainer(max_epochs=1).fit(Net(), datamodule=Data())


class Counter(tm.Callback):
    """A Lightning 1.x callback: its state is what on_save_checkpoint returns."""

    def __init__(self):
        self.count, self.loaded = 0, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.count += 1

    def on_save_checkpoint(self, trainer, module, checkpoint):
        return {"count": self.count}

    def on_load_checkpoint(self, trainer, module, callback_state):
        self.loaded.append(callback_state)
        self.count = callback_state["count"]


class Modern(tm.Callback):
    """A Lightning 2.x callback in the same run: it gets the checkpoint, as before."""

    def __init__(self):
        self.loaded = []

    def on_save_checkpoint(self, trainer, module, checkpoint):
        checkpoint["modern"] = 5

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self.loaded.append(checkpoint)


def test_a_1x_callbacks_returned_state_is_saved_under_its_key_and_given_back_to_on_load_checkpoint(tmp_path):
    counter, modern = Counter(), Modern()
    trainer = quiet_trainer(max_epochs=1, callbacks=[counter, modern])
    trainer.fit(Net(), _loader())
    path = tmp_path / "one.ckpt"
    with pytest.warns(FutureWarning, match=r"Counter\.on_save_checkpoint returns a value: .*state_dict\(\)"):
        trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    assert saved["callbacks"][counter.state_key] == {"count": 2}  # 8 samples, batches of 4
    resumed_counter, resumed_modern = Counter(), Modern()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        resumed = quiet_trainer(max_epochs=2, callbacks=[resumed_counter, resumed_modern])
        resumed.fit(Net(), _loader(), ckpt_path=path)
    assert resumed_counter.loaded == [{"count": 2}]
    assert resumed_counter.count == 4  # restored, then two more batches
    assert len(resumed_modern.loaded) == 1 and resumed_modern.loaded[0]["modern"] == 5


QUEUE_PROGRAM = textwrap.dedent("""
    import warnings
    import torch, torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    import trainmesh as tm

    class Net(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.layer(batch[0]), batch[1])
            self.log("loss", loss, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def add_to_queue(self, queue):
            queue.put({"rank": self.global_rank, "in_worker": self.trainer.global_step})
            queue.put("second")

        def get_from_queue(self, queue):
            print("GOT", queue.get(), queue.get(), queue.empty(), float(self.trainer.callback_metrics["loss"]) > 0)

    if __name__ == "__main__":
        warnings.simplefilter("ignore")
        data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), 4)
        trainer = tm.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
        trainer.fit(Net(), data)
""")


def test_add_to_queue_in_the_ddp_spawn_worker_reaches_get_from_queue_in_the_launching_process(tmp_path):
    script = tmp_path / "queue_run.py"
    script.write_text(QUEUE_PROGRAM)
    result = run_program([str(script)], timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    # rank 0 put them after its 2 steps (16 samples, 2 workers, batches of 4); the parent got both, in order
    assert "GOT {'rank': 0, 'in_worker': 2} second True True" in result.stdout, result.stdout + result.stderr[-2000:]
