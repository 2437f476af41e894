"""What pytorch-lightning 1.9.5 does with 1.x leftovers that ported programs still carry, as data (part of
``lightning1_deprecations.measure``, recorded by ``record_lightning_1_9_deprecations.py``):

- a callback's ``on_save_checkpoint`` that returns a value (1.x's way to save a callback's state until 1.6);
- each hook Lightning removed in 1.8 (``on_epoch_end``, ``on_batch_start``, ``get_progress_bar_dict``, ...),
  defined by a module, a callback or a data module: refused at the run's start (the exception's type and
  message) or run without calling it;
- ``Trainer(weights_summary=...)`` and ``Trainer(distributed_backend=...)``;
- ``utilities.seed``'s 1.x functions: whether each warns a deprecation.
"""

import importlib
import tempfile
import warnings

import torch

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
MODULE_HOOKS = (
    "on_epoch_start",
    "on_epoch_end",
    "on_batch_start",
    "on_batch_end",
    "on_pretrain_routine_start",
    "on_pretrain_routine_end",
    "on_hpc_save",
    "on_hpc_load",
    "get_progress_bar_dict",
    "on_train_dataloader",
    "on_val_dataloader",
    "on_test_dataloader",
    "on_predict_dataloader",
    "add_to_queue",
    "get_from_queue",
    "on_post_move_to_device",
)
CALLBACK_HOOKS = (
    "on_epoch_start",
    "on_epoch_end",
    "on_batch_start",
    "on_batch_end",
    "on_pretrain_routine_start",
    "on_pretrain_routine_end",
    "on_init_start",
    "on_init_end",
    "on_before_accelerator_backend_setup",
    "on_configure_sharded_model",
    "on_keyboard_interrupt",
)
DATAMODULE_HOOKS = (
    "on_save_checkpoint",
    "on_load_checkpoint",
    "on_train_dataloader",
    "on_val_dataloader",
    "on_test_dataloader",
    "on_predict_dataloader",
)


def _numpy_inf():
    """pytorch-lightning 1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed."""
    import numpy

    if not hasattr(numpy, "Inf"):
        numpy.Inf = numpy.inf


def _module_class(pl):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.a(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return _loader()

    return Model


def _loader():
    x = torch.arange(8.0).reshape(4, 2) / 8
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=2)


def _fit(pl, model, calls, **options):
    """A one-epoch fit: what it raised (type and message) or "trained", and the hooks called."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pl.Trainer(max_epochs=1, **{**QUIET, **options}).fit(model)
        return ["trained", "", sorted(set(calls))]
    except Exception as exc:  # noqa: BLE001 - the exception is the measurement
        return [type(exc).__name__, str(exc), sorted(set(calls))]


def _recorder(calls, name):
    def hook(self, *args, **kwargs):
        calls.append(name)

    return hook


def removed_hooks(pl) -> dict:
    """Each removed hook alone, on a module, a callback, a data module: what one fit does."""
    model_class = _module_class(pl)
    found = {"module": {}, "callback": {}, "datamodule": {}}
    for name in MODULE_HOOKS:
        calls = []
        model = type("Model", (model_class,), {name: _recorder(calls, name)})()
        found["module"][name] = _fit(pl, model, calls)
    for name in CALLBACK_HOOKS:
        calls = []
        callback = type("Old", (pl.Callback,), {name: _recorder(calls, name)})()
        found["callback"][name] = _fit(pl, model_class(), calls, callbacks=[callback])
    for name in DATAMODULE_HOOKS:
        calls = []
        hooks = {name: _recorder(calls, name), "train_dataloader": lambda self: _loader()}
        data = type("Data", (pl.LightningDataModule,), hooks)()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pl.Trainer(max_epochs=1, **QUIET).fit(model_class(), datamodule=data)
            found["datamodule"][name] = ["trained", "", sorted(set(calls))]
        except Exception as exc:  # noqa: BLE001 - the exception is the measurement
            found["datamodule"][name] = [type(exc).__name__, str(exc), sorted(set(calls))]
    return found


def returned_callback_state(pl) -> dict:
    """A callback whose ``on_save_checkpoint`` returns its state (1.x until 1.6) and whose
    ``on_load_checkpoint(trainer, module, state)`` reads it back: fit, save, resume."""
    seen = []

    class Counter(pl.Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            return {"batches": 3}

        def on_load_checkpoint(self, trainer, pl_module, checkpoint):
            seen.append("the state" if checkpoint == {"batches": 3} else "the checkpoint")

    model_class = _module_class(pl)
    with tempfile.TemporaryDirectory() as folder:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer = pl.Trainer(max_epochs=1, callbacks=[Counter()], **QUIET)
                trainer.fit(model_class())
                trainer.save_checkpoint(f"{folder}/saved.ckpt")
                saved = torch.load(f"{folder}/saved.ckpt", weights_only=False)
                stored = [key for key, value in saved["callbacks"].items() if value == {"batches": 3}]
                resumed = pl.Trainer(max_epochs=2, callbacks=[Counter()], **QUIET)
                resumed.fit(model_class(), ckpt_path=f"{folder}/saved.ckpt")
            return {"raised": "", "stored": len(stored), "load_got": seen}
        except Exception as exc:  # noqa: BLE001 - the exception is the measurement
            return {"raised": type(exc).__name__, "message": str(exc), "load_got": seen}


def old_trainer_arguments(trainer_class) -> dict:
    """``Trainer(weights_summary=...)`` and ``Trainer(distributed_backend=...)``: the exception's type or "built"."""
    found = {}
    for name, value in {"weights_summary": None, "distributed_backend": "ddp"}.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trainer_class(**QUIET, **{name: value})
            found[name] = "built"
        except Exception as exc:  # noqa: BLE001 - the exception's type is the measurement
            found[name] = type(exc).__name__
    return found


def seed_functions(root: str) -> dict:
    """Whether each of ``utilities.seed``'s functions warns a deprecation."""
    seed = importlib.import_module(f"{root}.utilities.seed")
    calls = {
        "seed_everything": lambda: seed.seed_everything(3),
        "reset_seed": seed.reset_seed,
        "pl_worker_init_function": lambda: seed.pl_worker_init_function(0, 0),
        "isolate_rng": lambda: seed.isolate_rng().__enter__(),
    }
    found = {}
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        found[name] = any(issubclass(w.category, (DeprecationWarning, FutureWarning)) for w in caught)
    return found


def removed_module_paths(root: str) -> dict:
    """A 1.x program's ``from <root>.core.lightning import LightningModule`` (removed in 1.9): whether it
    imports, and what constructing a subclass raises (type and message)."""
    try:
        base = importlib.import_module(f"{root}.core.lightning").LightningModule
    except ImportError as exc:
        return {"core.lightning": ["import", type(exc).__name__]}

    class Subclass(base):
        def __init__(self):
            super().__init__()

    try:
        Subclass()
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return {"core.lightning": ["construct", type(exc).__name__, str(exc)]}
    return {"core.lightning": ["construct", None]}


def log_integers(pl) -> dict:
    """A 1.x module (it defines ``training_epoch_end``) logging an integer tensor, a Python int and a bool:
    the warnings that name ``self.log`` and the logged values' dtype and number."""

    class Logs(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("int_tensor", torch.tensor(3))
            self.log("py_int", 4)
            self.log("py_bool", True)
            return self.layer(batch[0]).sum()

        def training_epoch_end(self, outputs):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = pl.Trainer(max_epochs=1, default_root_dir=root, **QUIET)
        trainer.fit(Logs(), data)
    said = [str(w.message) for w in caught if "self.log" in str(w.message)]
    return {"warnings": said, "values": {k: [str(v.dtype), v.item()] for k, v in trainer.callback_metrics.items()}}


def tune_lines(pl) -> list:
    """``Trainer(auto_scale_batch_size="power")`` and ``trainer.tune``: the lines its loggers say about the
    search's trials and its temporary checkpoint (the path's folder and id left out)."""
    import logging
    import re

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer, self.batch_size = torch.nn.Linear(2, 1), 2

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def training_epoch_end(self, outputs):
            pass

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 2)), self.batch_size)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    lines: list = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(re.sub(r" \S*(\.scale_batch_size)_\S*", r" \1", record.getMessage()))
    logger = logging.getLogger(pl.__name__)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory() as root:
            pl.Trainer(max_epochs=1, default_root_dir=root, auto_scale_batch_size="power", **QUIET).tune(Model())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [line for line in lines if line.startswith(("Batch size", "Restor", "Finished"))]


def measure(root: str) -> dict:
    _numpy_inf()
    pl = importlib.import_module(root)
    return {
        "removed_hooks": removed_hooks(pl),
        "returned_callback_state": returned_callback_state(pl),
        "old_trainer_arguments": old_trainer_arguments(pl.Trainer),
        "seed_functions": seed_functions(root),
        "removed_module_paths": removed_module_paths(root),
        "log_integers": log_integers(pl),
        "tune_lines": tune_lines(pl),
    }
