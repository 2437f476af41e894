"""Lightning 2.6's module paths below its packages (``callbacks.callback``, ``accelerators.cuda``,
``plugins.precision.amp``, ``utilities.data``, ...), imported as a ported program imports them, and
the functions they hold answering as Lightning's do for the same input."""

from __future__ import annotations

import importlib
import re
import statistics
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

pytest.importorskip("lightning")

from helpers.lightning_inventory import public_modules  # noqa: E402
from trainmesh.utilities.refusal import RefusedError, refusal_of  # noqa: E402


def test_every_lightning_module_with_public_names_has_trainmesh_s_module_of_the_same_path():
    from helpers.lightning_inventory import _module_names

    absent = []
    for path in public_modules("lightning.pytorch"):
        if not _module_names("lightning.pytorch", path):
            continue  # a module of Lightning's internals only (connectors, loops' private classes)
        try:
            importlib.import_module(f"trainmesh.{path}")
        except ImportError:
            absent.append(path)
    # the ones left, each listed as "missing" in docs/lightning-api.md
    assert set(absent) <= {"core.hooks", "core.mixins", "core.mixins.hparams_mixin", "core.optimizer", "core.saving"}, (
        absent
    )


@pytest.mark.parametrize(
    ("path", "name", "home"),
    [
        ("callbacks.callback", "Callback", "trainmesh.callbacks"),
        ("callbacks.lr_finder", "LearningRateFinder", "trainmesh.callbacks"),
        ("callbacks.batch_size_finder", "BatchSizeFinder", "trainmesh.callbacks"),
        ("callbacks.on_exception_checkpoint", "OnExceptionCheckpoint", "trainmesh.callbacks"),
        ("callbacks.throughput_monitor", "ThroughputMonitor", "trainmesh.callbacks"),
        ("accelerators.accelerator", "Accelerator", "trainmesh.accelerators"),
        ("accelerators.cpu", "CPUAccelerator", "trainmesh.accelerators"),
        ("accelerators.cuda", "CUDAAccelerator", "trainmesh.accelerators"),
        ("strategies.strategy", "Strategy", "trainmesh.strategies"),
        ("strategies.single_device", "SingleDeviceStrategy", "trainmesh.strategies"),
        ("plugins.precision.amp", "MixedPrecision", "trainmesh.plugins"),
        ("plugins.precision.precision", "Precision", "trainmesh.plugins"),
        ("plugins.io.async_plugin", "AsyncCheckpointIO", "trainmesh.plugins"),
        ("profilers.base", "PassThroughProfiler", "trainmesh.profilers"),
    ],
)
def test_a_deep_path_gives_the_package_s_own_object(path, name, home):
    assert getattr(importlib.import_module(f"trainmesh.{path}"), name) is getattr(importlib.import_module(home), name)


BATCHES = [
    torch.zeros(5, 3),
    torch.tensor(2.0),
    {"x": torch.zeros(4, 2), "y": [torch.zeros(4)]},
    [torch.zeros(6, 1), {"z": torch.zeros(6)}],
    ("text", torch.zeros(3, 3)),
]


@pytest.mark.parametrize("batch", BATCHES, ids=range(len(BATCHES)))
def test_extract_batch_size_answers_as_lightning_s(batch):
    from lightning.pytorch.utilities.data import extract_batch_size as theirs

    from trainmesh.utilities.data import extract_batch_size as ours

    assert ours(batch) == theirs(batch)


def test_extract_batch_size_refuses_and_warns_as_lightning_s():
    from lightning.pytorch.utilities.data import extract_batch_size as theirs
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as TheirError

    from trainmesh.utilities.data import extract_batch_size as ours
    from trainmesh.utilities.exceptions import MisconfigurationException as OurError

    for function, error in ((theirs, TheirError), (ours, OurError)):
        with pytest.raises(error):
            function(["no tensor"])
    ambiguous = [torch.zeros(2), torch.zeros(3)]
    from trainmesh.utilities import data

    data._WARNINGS.clear()  # once per message and process, as Lightning's warning cache
    with pytest.warns(UserWarning, match="ambiguous"):
        assert ours(ambiguous) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert theirs(ambiguous) == 2


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def test_loader_length_helpers_answer_as_lightning_s():
    import lightning.pytorch.utilities.data as theirs

    import trainmesh.utilities.data as ours

    loaders = [DataLoader(TensorDataset(torch.zeros(10, 1)), batch_size=4), DataLoader(_Stream()), object()]
    for loader in loaders:
        assert ours.sized_len(loader) == theirs.sized_len(loader)
        assert ours.has_iterable_dataset(loader) == theirs.has_iterable_dataset(loader)


def test_merge_dicts_answers_as_lightning_s():
    from lightning.pytorch.loggers.logger import merge_dicts as theirs

    from trainmesh.loggers.logger import merge_dicts as ours

    dicts = [{"a": 1.7, "b": 2.0, "d": {"d1": 1, "d3": 3}}, {"a": 1.1, "b": None, "v": 1, "d": {"d1": 2}}]
    functions = {"a": statistics.mean, "v": max, "d": {"d1": sum}}
    assert ours(dicts, functions, min) == theirs(dicts, functions, min)
    assert ours(dicts) == theirs(dicts)


def test_device_stats_answer_as_lightning_s():
    """With psutil: Lightning's keys; without it (the test venv need not have it): the same error."""
    import importlib.util

    from lightning.pytorch.accelerators.cpu import get_cpu_stats as their_cpu
    from lightning.pytorch.accelerators.mps import get_device_stats as their_mps

    from trainmesh.accelerators.cpu import get_cpu_stats as our_cpu
    from trainmesh.accelerators.mps import get_device_stats as our_mps

    for ours, theirs in ((our_cpu, their_cpu), (our_mps, their_mps)):
        if importlib.util.find_spec("psutil") is not None:
            assert sorted(ours()) == sorted(theirs())
        else:
            for function in (ours, theirs):
                with pytest.raises(ModuleNotFoundError):
                    function()


def test_cuda_helpers_answer_as_lightning_s_without_nvidia_smi(monkeypatch):
    from lightning.pytorch.accelerators import cuda as theirs

    from trainmesh.accelerators import cuda as ours

    assert ours.num_cuda_devices() == theirs.num_cuda_devices()
    monkeypatch.setenv("PATH", "/nonexistent")
    for module in (theirs, ours):
        with pytest.raises(FileNotFoundError):
            module.get_nvidia_gpu_stats(torch.device("cuda", 0))


def test_timer_interval_and_sigterm_exception_are_lightning_s():
    from lightning.pytorch.callbacks.timer import Interval as TheirInterval

    from trainmesh.callbacks import Timer
    from trainmesh.callbacks.timer import Interval
    from trainmesh.supervision.preemption import Preempted
    from trainmesh.utilities.exceptions import SIGTERMException

    assert [i.value for i in Interval] == [i.value for i in TheirInterval]
    Timer(duration="00:00:01:00", interval=Interval.epoch)  # accepted where the string is
    assert issubclass(Preempted, SIGTERMException) and issubclass(SIGTERMException, SystemExit)


def test_lightning_2_0_precision_plugin_names_make_today_s_classes():
    from trainmesh.plugins.precision import FSDPPrecision, HalfPrecision, HalfPrecisionPlugin, MixedPrecisionPlugin
    from trainmesh.plugins.precision.fsdp import FSDPMixedPrecisionPlugin
    from trainmesh.utilities.refusal import LightningOneName

    with pytest.warns(LightningOneName, match="HalfPrecision"):
        assert isinstance(HalfPrecisionPlugin("bf16-true"), HalfPrecision)
    with pytest.warns(LightningOneName):
        assert MixedPrecisionPlugin(16, "cpu").precision == "16-mixed"
    with pytest.warns(LightningOneName):
        assert isinstance(FSDPMixedPrecisionPlugin("bf16-mixed"), FSDPPrecision)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("strategies.xla", "XLAStrategy"),
        ("strategies.single_xla", "SingleDeviceXLAStrategy"),
        ("utilities.migration", "migrate_checkpoint"),
        ("utilities.model_registry", "download_model_from_registry"),
        ("loops.fit_loop", "RestartStage"),
        ("loops.optimization.automatic", "Closure"),
        ("overrides.distributed", "UnrepeatedDistributedSamplerWrapper"),
        ("callbacks.progress.rich_progress", "MetricsTextColumn"),
        ("callbacks.progress.tqdm_progress", "Tqdm"),
        ("loggers.csv_logs", "ExperimentWriter"),
    ],
)
def test_names_that_cannot_run_here_refuse_with_their_reason(path, name):
    refused = getattr(importlib.import_module(f"trainmesh.{path}"), name)
    with pytest.raises(RefusedError, match=re.escape(refusal_of(refused))):
        refused()


def _summary_model(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(4, 300)
            self.norm = torch.nn.BatchNorm1d(300)
            self.head = torch.nn.Sequential(torch.nn.Linear(300, 2))
            self.example_input_array = torch.zeros(3, 4)

        def forward(self, x):
            return self.head(self.norm(self.encoder(x)))

    torch.manual_seed(0)
    net = Net()
    net.norm.eval()
    net.encoder.weight.requires_grad_(False)
    return net


@pytest.mark.parametrize("max_depth", [0, 1, -1])
def test_model_summary_object_answers_as_lightning_s(max_depth):
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.model_summary import ModelSummary as Theirs

    import trainmesh as tm
    from trainmesh.utilities.model_summary.model_summary import ModelSummary as Ours

    theirs = Theirs(_summary_model(pl.LightningModule), max_depth=max_depth)
    ours = Ours(_summary_model(tm.Module), max_depth=max_depth)
    for name in (
        "layer_names",
        "layer_types",
        "param_nums",
        "training_modes",
        "total_training_modes",
        "total_parameters",
        "trainable_parameters",
        "total_layer_params",
        "in_sizes",
        "out_sizes",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.model_size == pytest.approx(theirs.model_size)
    assert str(ours) == str(theirs)


def test_summary_formatters_answer_as_lightning_s():
    import lightning.pytorch.utilities.model_summary as theirs

    import trainmesh.utilities.model_summary as ours

    for number in (0, 7, 999, 1_000, 1_290, 99_999, 100_000, 2_100_000, 1_200_000_000, 5 * 10**15):
        assert ours.get_human_readable_count(number) == theirs.get_human_readable_count(number)
    assert ours.get_formatted_model_size(1234.56789) == theirs.get_formatted_model_size(1234.56789)
    batch = [torch.zeros(2, 3), (torch.zeros(4), "x")]
    assert ours.parse_batch_shape(batch) == theirs.parse_batch_shape(batch)
    net = torch.nn.Linear(3, 2)
    mine, theirs_layer = ours.LayerSummary(net), theirs.LayerSummary(net)
    net(torch.zeros(5, 3))
    assert (mine.in_size, mine.out_size, mine.num_parameters, mine.layer_type, mine.training) == (
        theirs_layer.in_size,
        theirs_layer.out_size,
        theirs_layer.num_parameters,
        theirs_layer.layer_type,
        theirs_layer.training,
    )


def test_from_compiled_trains_the_module_compiled_with_the_user_s_settings_as_lightning_s():
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.compile import from_compiled as their_from
    from lightning.pytorch.utilities.compile import to_uncompiled as their_to

    import trainmesh as tm
    from trainmesh.strategies.compile import compiled_by_user
    from trainmesh.utilities.compile import from_compiled, to_uncompiled

    ours = _summary_model(tm.Module)
    compiled = torch.compile(ours, backend="eager")
    assert from_compiled(compiled) is ours and compiled_by_user(ours) is not None
    assert to_uncompiled(ours) is ours and compiled_by_user(ours) is None
    theirs = _summary_model(pl.LightningModule)
    assert their_to(their_from(torch.compile(theirs, backend="eager"))) is theirs
    for function, reference in ((to_uncompiled, their_to), (from_compiled, their_from)):
        for wrong in (torch.nn.Linear(1, 1), ours if function is to_uncompiled else theirs):
            with pytest.raises(ValueError):
                function(wrong)
        with pytest.raises(ValueError):
            reference(torch.nn.Linear(1, 1))


def test_small_loop_and_bar_helpers_answer_as_lightning_s():
    from lightning.pytorch.callbacks.progress.tqdm_progress import convert_inf as their_inf
    from lightning.pytorch.loops.utilities import check_finite_loss as their_check

    from trainmesh.callbacks.progress.tqdm_progress import convert_inf
    from trainmesh.loops.utilities import check_finite_loss

    for value in (None, 3, 2.5, float("inf"), float("nan")):
        assert convert_inf(value) == their_inf(value) or (value != value and convert_inf(value) is None)
    for loss in (None, torch.tensor(1.0), torch.tensor([1.0, 2.0])):
        check_finite_loss(loss)
        their_check(loss)
    for loss in (torch.tensor(float("nan")), torch.tensor([1.0, float("inf")])):
        for check in (check_finite_loss, their_check):
            with pytest.raises(ValueError):
                check(loss)


def _optimizer_types(pl, optimizer_module, manual):
    """Whether what the module is handed (self.optimizers() under manual optimization, optimizer_step's
    optimizer under automatic) is a LightningOptimizer, and an instance of the user's optimizer class."""
    seen = []
    lightning_optimizer = importlib.import_module(optimizer_module).LightningOptimizer

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).sum()
            if not manual:
                return loss
            opt = self.optimizers()
            seen.append((isinstance(opt, lightning_optimizer), isinstance(opt, torch.optim.SGD)))
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            seen.append((isinstance(optimizer, lightning_optimizer), isinstance(optimizer, torch.optim.SGD)))
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2))
    return seen


@pytest.mark.parametrize("manual", [False, True])
def test_the_optimizers_a_module_is_handed_are_lightning_optimizers_as_lightning_s(manual):
    import lightning.pytorch as pl

    import trainmesh as tm
    from trainmesh.core.hooks import CheckpointHooks, DataHooks, ModelHooks
    from trainmesh.core.optimizer import LightningOptimizer, do_nothing_closure

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _optimizer_types(pl, "lightning.pytorch.core.optimizer", manual)
        ours = _optimizer_types(tm, "trainmesh.core.optimizer", manual)
    assert ours == theirs == [(True, True)]
    assert do_nothing_closure() is None
    with pytest.raises(TypeError, match="self.optimizers"):
        LightningOptimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1))
    assert issubclass(tm.Module, (ModelHooks, DataHooks)) and hasattr(CheckpointHooks, "on_load_checkpoint")


def test_import_lightning_as_l_reads_l_pytorch_s_packages_as_lightning_does():
    """``import lightning as L`` then ``L.pytorch.callbacks.EarlyStopping`` / ``L.pytorch.loggers.CSVLogger``
    (l-progs7 p01, p06: stored files 32126587493, 619297837), ported to ``import trainmesh as L``. Before:
    AttributeError: module 'trainmesh' has no attribute 'pytorch' unless a ``trainmesh.X`` import came first."""
    import lightning as L

    import trainmesh as T

    for path in ("Trainer", "callbacks.EarlyStopping", "loggers.CSVLogger", "callbacks.ModelCheckpoint"):
        theirs, ours = L.pytorch, T.pytorch
        for part in path.split("."):
            theirs, ours = getattr(theirs, part), getattr(ours, part)
        assert theirs.__name__ == ours.__name__
    assert T.pytorch is T


@pytest.mark.parametrize(
    ("module", "name", "fabric_name"),
    [
        ("loggers.csv_logs", "FabricCSVLogger", "CSVLogger"),
        ("loggers.tensorboard", "FabricTensorBoardLogger", "TensorBoardLogger"),
        ("loggers.logger", "FabricLogger", "Logger"),
    ],
)
def test_lightning_s_modules_name_fabric_s_loggers(module, name, fabric_name):
    # Lightning's Trainer-side modules import Fabric's loggers under these names (they were refused
    # while trainmesh had no Fabric): the same classes as the Fabric package's
    import importlib

    import lightning.fabric.loggers

    assert getattr(importlib.import_module(f"lightning.pytorch.{module}"), name) is getattr(
        lightning.fabric.loggers, fabric_name
    )
    from trainmesh.fabric import loggers

    assert getattr(importlib.import_module(f"trainmesh.{module}"), name) is getattr(loggers, fabric_name)
