"""``Trainer(precision=..., plugins=[a precision plugin])`` against Lightning 2.6 on the CPU
(trainer/precision_flag.py): the same program under both, compared on ``trainer.precision``, the
precision plugin's class, precision and scaler, the precision warnings, what the module sees (its
``trainer.precision`` and ``dtype``, the batch's, ``self(x)``'s, the loss's and the gradients' dtypes)
and the trained weights, bit for bit. ``"16-mixed"`` (``16``, ``"16"``) on the CPU trains
``"bf16-mixed"`` with Lightning's warning; float16 with a GradScaler there is the plugin's
(``MixedPrecision("16-mixed", "cpu")``, its ``scaler`` too). Under ddp at 2 processes, one launch a
framework: tests/trainer/precision_ddp_run.py, in conftest.py's shared ``lightning_ddp`` launch."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
import trainmesh.plugins as tm_plugins

pl = pytest.importorskip("lightning.pytorch")
import lightning.pytorch.plugins as pl_plugins  # noqa: E402

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


def run(framework: str, settings) -> dict:
    """The program's outcome under ``framework`` with the Trainer arguments ``settings(plugins)``."""
    Trainer, Module, plugins = (
        (pl.Trainer, pl.LightningModule, pl_plugins)
        if framework == "lightning"
        else (tm.Trainer, tm.Module, tm_plugins)
    )
    seen: dict = {}

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.net(x)

        def on_fit_start(self):
            seen["module"] = (self.trainer.precision, str(self.dtype))

        def training_step(self, batch, batch_idx):
            out = self(batch[0])
            loss = nn.functional.mse_loss(out, batch[1])
            seen.setdefault("dtypes", (str(batch[0].dtype), str(out.dtype), str(loss.dtype), str(self.dtype)))
            return loss

        def on_before_optimizer_step(self, optimizer):
            seen.setdefault("grads", sorted({str(p.grad.dtype) for p in self.parameters()}))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    model = Net()
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=data), torch.randn(32, 1, generator=data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(max_steps=4, **QUIET, **settings(plugins))
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    plugin = trainer.precision_plugin
    scaler = getattr(plugin, "scaler", None)
    seen["trainer"] = (trainer.precision, type(plugin).__name__, plugin.precision, getattr(plugin, "device", None))
    seen["scaler"] = None if scaler is None else (type(scaler).__name__, scaler.get_scale())
    seen["warnings"] = sorted({str(w.message) for w in caught if "precision" in str(w.message).lower()})
    seen["weights"] = [t.detach() for t in model.state_dict().values()]
    return seen


def assert_same(lightning: dict, ours: dict) -> None:
    assert [torch.equal(a, b) for a, b in zip(lightning.pop("weights"), ours.pop("weights"))] == [True] * 4
    assert ours == lightning


CASES = {
    "16-mixed": lambda p: {"precision": "16-mixed"},
    "16-mixed_cpu": lambda p: {"precision": "16-mixed", "accelerator": "cpu"},
    "16": lambda p: {"precision": 16},
    "16_string": lambda p: {"precision": "16"},
    "bf16": lambda p: {"precision": "bf16"},
    "bf16-mixed": lambda p: {"precision": "bf16-mixed"},
    "bf16-true": lambda p: {"precision": "bf16-true"},
    "16-true": lambda p: {"precision": "16-true"},
    "32": lambda p: {"precision": 32},
    "64": lambda p: {"precision": 64},
    "64_string": lambda p: {"precision": "64"},
    "64-true": lambda p: {"precision": "64-true"},
    "plugin_16-mixed": lambda p: {"plugins": [p.MixedPrecision("16-mixed", "cpu")]},
    "plugin_16-mixed_scaler": lambda p: {
        "plugins": [p.MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))]
    },
    "plugin_bf16-mixed": lambda p: {"plugins": [p.MixedPrecision("bf16-mixed", "cpu")]},
    "plugin_half": lambda p: {"plugins": [p.HalfPrecision()]},
    "plugin_double": lambda p: {"plugins": [p.DoublePrecision()]},
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_precision_trains_as_lightnings_on_the_cpu(case):
    """Before: "16-mixed", 16 and "16" trained float16 with a GradScaler on the CPU (weights 0.078
    apart after 4 steps, trainer.precision "16-mixed", no warning); "bf16" gave no warning; a
    MixedPrecision plugin's own scaler was refused."""
    assert_same(run("lightning", CASES[case]), run("trainmesh", CASES[case]))


def test_16_mixed_on_the_cpu_is_bf16_mixed_with_lightnings_warning():
    outcome = run("trainmesh", CASES["16"])
    assert outcome["trainer"] == ("bf16-mixed", "MixedPrecision", "bf16-mixed", "cpu") and outcome["scaler"] is None
    assert outcome["dtypes"][1] == "torch.bfloat16"
    assert outcome["warnings"] == [
        "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on CPU. "
        "Using `precision='bf16-mixed'` instead.",
        "`precision=16` is supported for historical reasons but its usage is discouraged. Please set your precision "
        "to 16-mixed instead!",
    ]
    fp16 = run("trainmesh", CASES["plugin_16-mixed"])  # float16 with a scaler, where a program asks for it
    assert fp16["dtypes"][1] == "torch.float16" and fp16["scaler"][0] == "GradScaler" and not fp16["warnings"]


@pytest.mark.parametrize("case", ["16-mixed", "64-true", "plugin_16-mixed_scaler", "plugin_double"])
def test_the_precision_plugin_is_one_object_the_given_one_where_one_was_given(case):
    """As Lightning's: trainer.precision_plugin is the plugin given (its scaler the run's), else one object
    made for the setting (before: a new object at each read, never the one given)."""
    found = {}
    for name, Trainer, plugins in (("lightning", pl.Trainer, pl_plugins), ("trainmesh", tm.Trainer, tm_plugins)):
        settings = CASES[case](plugins)
        trainer = Trainer(**QUIET, **settings)
        given = settings.get("plugins", [None])[0]
        found[name] = (trainer.precision_plugin is trainer.precision_plugin, trainer.precision_plugin is given)
        if given is not None and getattr(given, "scaler", None) is not None:
            assert trainer.precision_plugin.scaler is given.scaler
    assert found["trainmesh"] == found["lightning"]


@pytest.mark.parametrize("precision", ["8-bit", 8, "16-mixd"])
def test_an_invalid_precision_stops_with_lightnings_error(precision):
    with pytest.raises(ValueError) as lightning:
        pl.Trainer(precision=precision, **QUIET)
    with pytest.raises(ValueError) as ours:
        tm.Trainer(precision=precision, **QUIET)
    assert str(ours.value).startswith(str(lightning.value))  # then the nearest name, where one is near


@pytest.mark.parametrize("precision", ["transformer-engine", "transformer-engine-float16"])
def test_transformer_engine_is_refused_before_training(precision):
    """Lightning needs the transformer_engine package (an NVIDIA GPU's); trainmesh has no FP8 path."""
    with pytest.raises(Exception):  # noqa: B017 (here: ModuleNotFoundError, the package is not installed)
        pl.Trainer(precision=precision, **QUIET)
    with pytest.raises(ValueError, match="Transformer Engine.*not supported by trainmesh.*bf16-mixed"):
        tm.Trainer(precision=precision, **QUIET)


def test_a_scaler_beside_bf16_mixed_stops_as_lightnings():
    with pytest.raises(Exception) as lightning:
        pl_plugins.MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(Exception) as ours:
        tm_plugins.MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    assert type(ours.value).__name__ == type(lightning.value).__name__ == "MisconfigurationException"
    assert str(ours.value).split(", found")[0] == str(lightning.value).split(", found")[0]


def test_model_parallel_takes_lightnings_precisions():
    from lightning.pytorch.strategies import ModelParallelStrategy as LightningModelParallel

    from trainmesh.strategies import ModelParallelStrategy

    for precision in ("16-mixed", "64-true"):
        with pytest.raises(ValueError) as lightning:
            pl.Trainer(strategy=LightningModelParallel(), precision=precision, accelerator="cpu", **QUIET)
        with pytest.raises(ValueError) as ours:
            tm.Trainer(strategy=ModelParallelStrategy(), precision=precision, accelerator="cpu", **QUIET)
        assert str(ours.value) == str(lightning.value)


@pytest.mark.slow
def test_ddp_at_two_processes_trains_as_lightnings(lightning_ddp):
    """One launch a framework (precision_ddp_run.py, in conftest.py's ``lightning_ddp``): "16-mixed"
    (bf16-mixed, rank 0 warns) and the fp16 plugin, each rank's weights bit-equal to Lightning's
    rank's (before: trainmesh's "16-mixed" trained float16)."""
    outcomes = {
        framework: [
            torch.load(lightning_ddp / framework / "precision_ddp_run" / f"rank{r}.pt", weights_only=False)
            for r in (0, 1)
        ]
        for framework in ("lightning", "trainmesh")
    }
    for lightning, ours in zip(outcomes["lightning"], outcomes["trainmesh"]):
        for name in ("16-mixed", "plugin"):
            theirs, mine = lightning[name], ours[name]
            assert all(torch.equal(theirs["weights"][k], mine["weights"][k]) for k in theirs["weights"])
            theirs.pop("weights"), mine.pop("weights")
            assert mine == theirs
    assert outcomes["trainmesh"][0]["16-mixed"]["precision"] == "bf16-mixed"
    assert outcomes["trainmesh"][0]["16-mixed"]["warnings"] and not outcomes["trainmesh"][1]["16-mixed"]["warnings"]
    assert outcomes["trainmesh"][0]["plugin"]["out_dtype"] == "torch.float16"


def test_16_mixed_on_the_cpu_is_warned_from_the_library_s_line_as_lightning_s():
    """Lightning's warning comes from its accelerator connector, so the program sees
    ".../accelerator_connector.py:479: You passed ..." (Lightning's warning format, no category, no source
    line; l-progs7 p02). Before: trainmesh's named the program's Trainer(...) line, shown as
    "main.py:170: UserWarning: You passed ..." followed by that line."""
    from_the_library = {}
    for name, framework in (("lightning", pl), ("trainmesh", tm)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            framework.Trainer(accelerator="cpu", precision="16-mixed", logger=False, enable_progress_bar=False)
        (warned,) = [w for w in caught if "AMP with fp16 is not supported on CPU" in str(w.message)]
        package = os.path.dirname(os.path.dirname(framework.__file__)) if name == "lightning" else framework.__path__[0]
        from_the_library[name] = warned.filename.startswith(package + os.sep)
    assert from_the_library == {"lightning": True, "trainmesh": True}
