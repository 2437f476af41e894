"""What pytorch-lightning 1.9.5's own deprecation tests (tests_pytorch/deprecated_api/test_remove_2-0.py) check
that a program can see, as data: the 1.x module paths published programs import
(``utilities.distributed``, ``utilities.cloud_io``) answering on one process and on a one-process gloo
group, a 1.x ``backward(loss, optimizer, optimizer_idx)`` override calling ``super().backward``, and which 1.x Trainer arguments and members warn a deprecation (a ``DeprecationWarning`` or
``FutureWarning``, what ``pytest.deprecated_call`` and a program's filter on deprecations catch).

``measure(root)`` runs the same text with ``root`` = ``"pytorch_lightning"`` (1.9.5's venv:
``record_lightning_1_9_deprecations.py`` writes ``lightning_1_9_deprecations.json``) or ``"trainmesh"``
(``tests/utilities/test_lightning1_deprecations.py`` compares). Messages are not compared: ours name today's
spelling.
"""

import importlib
import io
import os
import tempfile
import warnings

import torch
import torch.distributed as dist

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
# each 1.x Trainer argument 1.9.5 deprecated, with a value given; and ones it did not (no line expected there)
TRAINER_ARGUMENTS = {
    "gpus": 0,
    "auto_select_gpus": True,
    "num_processes": 1,
    "resume_from_checkpoint": "missing.ckpt",
    "amp_backend": "native",
    "replace_sampler_ddp": False,
    "auto_lr_find": True,
    "track_grad_norm": 2,
    "move_metrics_to_cpu": True,
    "multiple_trainloader_mode": "min_size",
}


def _warned(fn):
    """(what ``fn()`` returned, as data, or the exception's type; whether it warned a deprecation)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = _data(fn())
        except Exception as exc:  # noqa: BLE001 - the exception's type is the measurement
            value = f"raised {type(exc).__name__}"
    return [value, any(issubclass(w.category, (DeprecationWarning, FutureWarning)) for w in caught)]


def _data(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else type(value).__name__


def _distributed(distributed) -> dict:
    """Without a process group, then on a one-process gloo group."""
    out = {
        "rank_zero_only": _warned(lambda: distributed.rank_zero_only(lambda: 5)()),
        "distributed_available": _warned(distributed.distributed_available),
        "tpu_distributed": _warned(distributed.tpu_distributed),
        "backend_for_cpu": _warned(
            lambda: distributed.get_default_process_group_backend_for_device(torch.device("cpu"))
        ),
        "sync_if_available": _warned(lambda: distributed.sync_ddp_if_available(torch.tensor(3.0))),
        "gather_if_available": _warned(lambda: distributed.all_gather_ddp_if_available(torch.tensor([1.0, 2.0]))),
        "rank_zero_info": _warned(lambda: distributed.rank_zero_info("x")),
        "comm_hook_none": _warned(lambda: distributed.register_ddp_comm_hook(None)),
    }
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=0, world_size=1)
        try:
            out["group"] = {
                "available": _warned(distributed.distributed_available),
                "sync_mean": _warned(lambda: distributed.sync_ddp(torch.tensor([3.0, 5.0]), reduce_op="mean")),
                "sync_max": _warned(lambda: distributed.sync_ddp_if_available(torch.tensor(4.0), reduce_op="max")),
                "sync_sum": _warned(lambda: distributed.sync_ddp_if_available(torch.tensor(4.0))),
                "gather": _warned(lambda: distributed.all_gather_ddp_if_available(torch.tensor([1.0, 2.0]))),
                "gather_all": _warned(lambda: distributed.gather_all_tensors(torch.arange(3))),
                "gather_all_0d": _warned(lambda: distributed.gather_all_tensors(torch.tensor(7))),
            }
            grad = torch.tensor([1.0, 2.0], requires_grad=True)
            gathered = distributed.all_gather_ddp_if_available(grad, sync_grads=True)
            out["group"]["gather_grad"] = [gathered.requires_grad, list(gathered.shape)]
        finally:
            dist.destroy_process_group()
    return out


def _cloud_io(cloud_io) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "saved.ckpt")
        buffer = io.BytesIO()
        torch.save({"w": torch.tensor([1.0, 2.0])}, buffer)
        buffer.seek(0)
        return {
            "atomic_save": _warned(lambda: cloud_io.atomic_save({"w": torch.tensor([3.0]), "n": 2}, path)),
            "load_path": _warned(lambda: cloud_io.load(path)),
            "load_map_location": _warned(lambda: cloud_io.load(path, map_location="cpu")),
            "load_buffer": _warned(lambda: cloud_io.load(buffer)),
            "filesystem": _warned(lambda: cloud_io.get_filesystem(path)),
            "filesystem_exists": cloud_io.get_filesystem(path).exists(path),
        }


def _trainer(Trainer) -> dict:
    out = {}
    for name, value in TRAINER_ARGUMENTS.items():
        out[name] = _warned(lambda given={name: value}: Trainer(**given, **QUIET) and None)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["strategy=None"] = type(Trainer(strategy=None, **QUIET).strategy).__name__  # 1.9.5's default
    trainer = Trainer(resume_from_checkpoint="missing.ckpt", **QUIET)
    out["member resume_from_checkpoint"] = _warned(lambda: trainer.resume_from_checkpoint)
    return out


def _backward_super(pl) -> dict:
    """1.x's ``backward(self, loss, optimizer, optimizer_idx)`` override calling ``super().backward`` with them
    (1.9.5's own tests_pytorch/loops/test_training_loop_flow_scalar.py does): 4 steps of SGD, the weights."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def backward(self, loss, optimizer, optimizer_idx):
            super().backward(loss, optimizer, optimizer_idx)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            generator = torch.Generator().manual_seed(1)
            x = torch.randn(16, 4, generator=generator)
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)

    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.Trainer(max_epochs=1, **QUIET).fit(model)
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()}


def _outputs_data(outputs):
    """``training_epoch_end``'s outputs as data: tensors as (value, requires_grad)."""
    if isinstance(outputs, torch.Tensor):
        return [round(outputs.item(), 5), outputs.requires_grad]
    if isinstance(outputs, dict):
        return {k: _outputs_data(v) for k, v in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return [_outputs_data(v) for v in outputs]
    return repr(outputs)


def _epoch_outputs(pl) -> dict:
    """1.x's ``training_epoch_end(outputs)`` (and ``on_train_batch_end``'s outputs) for a training_step
    returning a tensor, a tensor or None, a dict, with two optimizers (``optimizer_idx``), with
    ``accumulate_grad_batches=2``."""
    kinds = ("tensor", "none_on_odd", "dict", "two_optimizers", "accumulate", "manual_none_on_odd")
    return {kind: _outputs_of(pl, kind) for kind in kinds}


def _outputs_of(pl, kind: str) -> list:
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
            self.automatic_optimization = not kind.startswith("manual")

        def training_step(self, batch, batch_idx, optimizer_idx=0):
            loss = (self.a if optimizer_idx == 0 else self.b)(batch[0]).sum()
            if not self.automatic_optimization:
                self.manual_backward(loss)
                self.optimizers().step()
                self.optimizers().zero_grad()
            if kind.endswith("none_on_odd") and batch_idx % 2:
                return None
            # "preds" carries the step's graph: 1.9.5 detaches only the loss (ClosureResult.asdict)
            return {"loss": loss, "n": torch.tensor(batch_idx), "preds": loss * 2} if kind == "dict" else loss

        def on_train_batch_end(self, outputs, batch, batch_idx, *rest):
            seen.append(_outputs_data(outputs))

        def training_epoch_end(self, outputs):
            seen.append(["epoch", _outputs_data(outputs)])
            super().training_epoch_end(outputs)  # 1.9.5's default: nothing

        def configure_optimizers(self):
            second = [torch.optim.SGD(self.b.parameters(), lr=0.1)] if kind == "two_optimizers" else []
            return [torch.optim.SGD(self.a.parameters(), lr=0.1), *second]

    if kind != "two_optimizers":  # 1.x passes optimizer_idx only to a step that has several optimizers
        Model.training_step = lambda self, batch, batch_idx, f=Model.training_step: f(self, batch, batch_idx)
    x = torch.arange(8.0).reshape(4, 2) / 8
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=1)
    accumulate = 2 if kind == "accumulate" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.Trainer(max_epochs=1, accumulate_grad_batches=accumulate, **QUIET).fit(Model(), loader)
    return seen


def _evaluation_outputs(pl) -> dict:
    """1.x's ``validation_epoch_end(outputs)`` / ``test_epoch_end(outputs)`` when some steps return None (on
    odd batches; on every batch of a second loader)."""
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.a(batch[0]).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return None if batch_idx % 2 or dataloader_idx == 1 else self.a(batch[0]).sum()

        def validation_epoch_end(self, outputs):
            seen.append(["validation", _outputs_data(outputs)])

        def on_test_batch_start(self, batch, batch_idx, dataloader_idx):  # 1.x's: dataloader_idx required
            seen.append(["test batch", batch_idx, dataloader_idx])

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            return self.validation_step(batch, batch_idx, dataloader_idx)

        def test_epoch_end(self, outputs):
            seen.append(["test", _outputs_data(outputs)])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.arange(8.0).reshape(4, 2) / 8
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=1)
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=1, num_sanity_val_steps=0, **QUIET)
        trainer.fit(model, loader, [loader, loader])
        trainer.test(model, loader, verbose=False)
    return {"calls": seen}


def _step_end_returning_none(pl) -> dict:
    """1.x's ``training_step_end`` / ``validation_step_end`` / ``test_step_end`` that only log and return None
    (a dense classifier's metric updates, l-progs4 p01): 1.9.5 goes on with the step's own output (its
    loops take ``strategy_output if model_output is None else model_output``), so the loss still trains."""
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return {"loss": self.a(batch[0]).pow(2).mean(), "n": torch.tensor(batch_idx)}

        def training_step_end(self, outputs):
            self.log("n", outputs["n"].float())

        def training_epoch_end(self, outputs):
            seen.append(["train", _outputs_data(outputs)])

        def validation_step(self, batch, batch_idx):
            return {"v": self.a(batch[0]).sum()}

        def validation_step_end(self, outputs):
            self.log("v", outputs["v"])

        def validation_epoch_end(self, outputs):
            seen.append(["validation", _outputs_data(outputs)])

        def test_step(self, batch, batch_idx):
            return self.validation_step(batch, batch_idx)

        def test_step_end(self, outputs):
            self.log("t", outputs["v"])

        def test_epoch_end(self, outputs):
            seen.append(["test", _outputs_data(outputs)])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.arange(8.0).reshape(4, 2) / 8
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=1)
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=2, num_sanity_val_steps=0, **QUIET)
        trainer.fit(model, loader, loader)
        tested = trainer.test(model, loader, verbose=False)
    weights = [round(v, 6) for v in torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()]
    return {"calls": seen, "weights": weights, "global_step": trainer.global_step, "tested": _outputs_data(tested)}


def _strategy_optimizer_step(pl) -> dict:
    """A 1.x ``optimizer_step`` override warming the learning rate up, then stepping through
    ``self.trainer.strategy.optimizer_step(optimizer, optimizer_idx, optimizer_closure)`` (MixVPR's
    pattern; l-progs4 p03), with norm clipping and an ``on_before_optimizer_step``: the hooks run twice
    per step in 1.9.5 (its precision plugin wraps the closure, and the optimizer's step wraps it again)."""
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.a(batch[0]).pow(2).mean() * 10

        def on_before_optimizer_step(self, optimizer, optimizer_idx=0):
            seen.append(round(self.a.weight.grad.norm().item(), 5))

        def optimizer_step(
            self,
            epoch,
            batch_idx,
            optimizer,
            optimizer_idx,
            optimizer_closure,
            on_tpu=False,
            using_native_amp=False,
            using_lbfgs=False,
        ):
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * min(1.0, (self.trainer.global_step + 1) / 3)
            self.trainer.strategy.optimizer_step(optimizer, optimizer_idx, optimizer_closure)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    x = torch.arange(8.0).reshape(4, 2) / 8
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=1)
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=2, gradient_clip_val=0.05, **QUIET)
        trainer.fit(model, loader)
    weights = [round(v, 6) for v in torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()]
    return {"grad_norms_seen": seen, "weights": weights, "global_step": trainer.global_step}


# Trainer arguments removed before 1.9 that ported programs still pass (progress_bar_refresh_rate, weights ...)
REMOVED_TRAINER_ARGUMENTS = {
    "progress_bar_refresh_rate": 0,
    "checkpoint_callback": False,
    "reload_dataloaders_every_epoch": True,
    "flush_logs_every_n_steps": 10,
    "stochastic_weight_avg": True,
    "terminate_on_nan": True,
    "prepare_data_per_node": True,
    "process_position": 1,
    "log_gpu_memory": "all",
    "weights_save_path": "w",
    "truncated_bptt_steps": 2,
    "automatic_optimization": False,
    "row_log_interval": 5,
    "log_save_interval": 5,
    "early_stop_callback": True,
    "train_percent_check": 0.5,
    "val_percent_check": 0.5,
    "test_percent_check": 0.5,
    "overfit_pct": 0.1,
}


def _removed_trainer_arguments(trainer_class) -> dict:
    """What ``Trainer(name=value)`` raises for each argument removed before 1.9: the type, and its message."""
    found = {}
    for name, value in REMOVED_TRAINER_ARGUMENTS.items():
        try:
            trainer_class(**QUIET, **{name: value})
            found[name] = ["no error", ""]
        except Exception as exc:  # noqa: BLE001 - the exception is the measurement
            found[name] = [type(exc).__name__, str(exc)]
    return found


def _epoch_end_with_outputs(pl) -> dict:
    """A 1.x ``on_train_epoch_end(self, outputs)`` (Lightning passed outputs until 1.5; l-progs4 p09): the
    exception's type and how many training steps ran before it."""
    steps = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            steps.append(batch_idx)
            return self.a(batch[0]).sum()

        def on_train_epoch_end(self, outputs):
            steps.append("epoch end")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pl.Trainer(max_epochs=2, **QUIET).fit(Model(), loader)
        raised = "no error"
    except Exception as exc:  # noqa: BLE001 - the exception's type is the measurement
        raised = type(exc).__name__
    return {"raised": raised, "steps_before": len(steps)}


def _predict_epoch_end(pl) -> dict:
    """1.x's ``on_predict_epoch_end(results)`` (module) and ``on_predict_epoch_end(trainer, pl_module, outputs)``
    (callback): the predictions, a list per loader, with one loader and with two."""
    seen = []

    class Recorder(pl.Callback):
        def on_predict_epoch_end(self, trainer, pl_module, outputs):
            seen.append(["callback", _data(outputs)])

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(2, 1)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.a(batch[0]).sum()

        def on_predict_epoch_end(self, results):
            seen.append(["module", _data(results)])

    x = torch.arange(8.0).reshape(4, 2) / 8
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=2)
    model = Model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(callbacks=[Recorder()], **QUIET)
        returned = [_data(trainer.predict(model, loader)), _data(trainer.predict(model, [loader, loader]))]
    return {"calls": seen, "returned": returned}


def _tbptt_default(pl) -> list:
    """A module's ``truncated_bptt_steps`` when it sets none, and after it sets 2."""

    class Model(pl.LightningModule):
        pass

    model = Model()
    before = model.truncated_bptt_steps
    model.truncated_bptt_steps = 2
    return [before, model.truncated_bptt_steps]


# Trainers asking for a GPU this CPU machine lacks: 1.x programs fall back with
# ``except MisconfigurationException:`` (1.9.5 raises it, as Lightning 2.6 does for accelerator="gpu")
NO_GPU_ARGUMENTS = {"gpus=1": {"gpus": 1}, "gpus='0,'": {"gpus": "0,"}, "accelerator='gpu'": {"accelerator": "gpu"}}


def _no_gpu(root: str) -> dict:
    """Which of Misconfiguration/ValueError/other each Trainer asking for a missing GPU raises."""
    trainer_class = importlib.import_module(root).Trainer
    misconfigured = importlib.import_module(f"{root}.utilities.exceptions").MisconfigurationException
    found = {}
    for name, settings in NO_GPU_ARGUMENTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer_class(**QUIET, **settings)
            found[name] = "no error"
        except misconfigured:
            found[name] = "MisconfigurationException"
        except Exception as exc:  # noqa: BLE001 - the exception's type is the measurement
            found[name] = type(exc).__name__
    return found


def measure(root: str) -> dict:
    """Everything above, for the library named ``root``."""
    return {
        "backward_super": _backward_super(importlib.import_module(root)),
        "epoch_outputs": _epoch_outputs(importlib.import_module(root)),
        "evaluation_outputs": _evaluation_outputs(importlib.import_module(root)),
        "step_end_none": _step_end_returning_none(importlib.import_module(root)),
        "strategy_optimizer_step": _strategy_optimizer_step(importlib.import_module(root)),
        "distributed": _distributed(importlib.import_module(f"{root}.utilities.distributed")),
        "cloud_io": _cloud_io(importlib.import_module(f"{root}.utilities.cloud_io")),
        "trainer": _trainer(importlib.import_module(root).Trainer),
        "no_gpu": _no_gpu(root),
        "epoch_end_with_outputs": _epoch_end_with_outputs(importlib.import_module(root)),
        "removed_trainer_arguments": _removed_trainer_arguments(importlib.import_module(root).Trainer),
        "predict_epoch_end": _predict_epoch_end(importlib.import_module(root)),
        "tbptt_default": _tbptt_default(importlib.import_module(root)),
    }
