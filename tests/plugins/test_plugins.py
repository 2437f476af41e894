"""Lightning's ``plugins``, ``accelerators`` and ``strategies`` names (plugins/, accelerator_types.py,
strategies/lightning_names.py, trainer/plugins_argument.py) against Lightning 2.6's: the same
``Trainer(plugins=...)`` gives the same precision or the same error, the cluster environments read
the same ranks from the same variables, the layer sync converts and reverts the same layers, the
accelerator classes answer the same, and each name that cannot work here stops with its reason."""

import re
import warnings

import pytest
import torch

import trainmesh as tm
import trainmesh.accelerators as tm_accelerators
import trainmesh.loggers as tm_loggers
import trainmesh.plugins as tm_plugins
import trainmesh.strategies as tm_strategies
from trainmesh.plugins import environments as tm_environments
from trainmesh.utilities.refusal import LightningOneName, RefusedError, refusal_of

pl = pytest.importorskip("lightning.pytorch")
import lightning.pytorch.accelerators as pl_accelerators  # noqa: E402
import lightning.pytorch.plugins as pl_plugins  # noqa: E402
import lightning.pytorch.plugins.environments as pl_environments  # noqa: E402
import lightning.pytorch.strategies as pl_strategies  # noqa: E402

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.MixedPrecision("bf16-mixed", "cpu"),
        lambda p: p.HalfPrecision("bf16-true"),
        lambda p: p.HalfPrecision(),
        lambda p: p.DoublePrecision(),
        lambda p: p.Precision(),
    ],
    ids=["mixed", "half_bf16", "half", "double", "full"],
)
def test_precision_plugin_sets_lightnings_precision(make):
    lightning = pl.Trainer(accelerator="cpu", plugins=[make(pl_plugins)], **QUIET)
    trainer = tm.Trainer(accelerator="cpu", plugins=[make(tm_plugins)], **QUIET)
    assert trainer.precision == lightning.precision


@pytest.mark.parametrize(
    "settings",
    [
        {"plugins": [("MixedPrecision", "16-mixed", "cpu"), ("MixedPrecision", "bf16-mixed", "cpu")]},
        {"plugins": [("HalfPrecision",)], "precision": "bf16-mixed"},
        {"plugins": [("LightningEnvironment",), ("LightningEnvironment",)]},
        {"plugins": [("TorchSyncBatchNorm",), ("TorchSyncBatchNorm",)]},
    ],
    ids=["two_precisions", "precision_and_plugin", "two_environments", "two_layer_syncs"],
)
def test_plugin_mistakes_stop_with_lightnings_message(settings):
    def build(package):
        plugins = [getattr(package, name)(*args) for name, *args in settings["plugins"]]
        return {**settings, "plugins": plugins}

    environments = (pl_environments, tm_environments)
    packages = [(pl, pl_plugins, environments[0]), (tm, tm_plugins, environments[1])]
    messages = []
    for framework, plugins, environment in packages:
        names = {n: getattr(plugins, n, None) or getattr(environment, n) for n, *_ in settings["plugins"]}
        given = {**build(type("P", (), names)), "accelerator": "cpu", **QUIET}
        with pytest.raises(Exception) as error:
            framework.Trainer(**given)
        messages.append(re.sub(r"<[\w.]+\.(\w+) object at 0x\w+>", r"<\1>", str(error.value)))
    assert messages[1] == messages[0]


def test_an_object_that_is_no_plugin_is_refused_as_lightning_refuses_it():
    with pytest.raises(Exception, match="Found invalid type for plugin") as lightning:
        pl.Trainer(plugins=[object()], **QUIET)
    with pytest.raises(TypeError) as trainmesh:
        tm.Trainer(plugins=[object()], **QUIET)
    assert str(trainmesh.value).startswith(str(lightning.value).split(" Expected")[0].split("<object")[0])


SLURM = {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_NAME": "job"}
SLURM["SLURM_NTASKS_PER_NODE"] = "2"
TORCHRUN = {"RANK": "2", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}
TORCHRUN["TORCHELASTIC_RUN_ID"] = "7"


@pytest.mark.parametrize(
    "name, variables",
    [("SLURMEnvironment", SLURM), ("TorchElasticEnvironment", TORCHRUN), ("LightningEnvironment", {})],
)
def test_environments_read_the_same_place(monkeypatch, name, variables):
    for key in (*SLURM, *TORCHRUN):
        monkeypatch.delenv(key, raising=False)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    places = []
    for package in (pl_environments, tm_environments):
        env = getattr(package, name)()
        places.append((env.detect(), env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()))
    assert places[1] == places[0]


def test_environment_plugins_in_the_trainer(monkeypatch):
    for key in (*SLURM, *TORCHRUN):
        monkeypatch.delenv(key, raising=False)
    tm.Trainer(accelerator="cpu", plugins=[tm_plugins.LightningEnvironment()], **QUIET)  # what trainmesh does
    with pytest.raises(ValueError, match="was not started by it"):
        tm.Trainer(accelerator="cpu", plugins=[tm_plugins.SLURMEnvironment()], **QUIET)
    with pytest.raises(ValueError, match="no switch for it"):
        tm.Trainer(accelerator="cpu", plugins=[tm_plugins.SLURMEnvironment(auto_requeue=False)], **QUIET)
    with pytest.raises(ValueError, match="start the script with torchrun"):
        tm.Trainer(accelerator="cpu", plugins=[tm_plugins.KubeflowEnvironment()], **QUIET)


def test_checkpoint_io_plugins(tmp_path):
    tm.Trainer(accelerator="cpu", plugins=[tm_plugins.TorchCheckpointIO()], **QUIET)  # trainmesh's own writer
    trainer = tm.Trainer(accelerator="cpu", plugins=[tm_plugins.AsyncCheckpointIO()], **QUIET)
    assert trainer.runtime.checkpoints.saves.background is not None
    io, path = tm_plugins.TorchCheckpointIO(), str(tmp_path / "a" / "x.ckpt")
    io.save_checkpoint({"w": torch.ones(2)}, path)
    assert torch.equal(io.load_checkpoint(path)["w"], pl_plugins.TorchCheckpointIO().load_checkpoint(path)["w"])
    io.remove_checkpoint(path)
    with pytest.raises(TypeError, match="Found invalid type"):

        class Mine(tm_plugins.CheckpointIO):
            pass

        tm.Trainer(plugins=[Mine()], **QUIET)


def batch_norm_model():
    return torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Sequential(torch.nn.BatchNorm2d(2))
    )


def test_layer_sync_converts_and_reverts_as_lightnings():
    shapes = []
    for sync in (pl_plugins.TorchSyncBatchNorm(), tm_plugins.TorchSyncBatchNorm()):
        torch.manual_seed(0)
        model = batch_norm_model()
        synced = [type(m).__name__ for m in sync.apply(model).modules()]
        reverted = sync.revert(model)
        shapes.append((synced, [type(m).__name__ for m in reverted.modules()], reverted.state_dict()))
    assert shapes[1][:2] == shapes[0][:2]
    assert shapes[0][0].count("SyncBatchNorm") == 2 and shapes[0][1].count("_BatchNormXd") == 2
    assert all(torch.equal(shapes[1][2][k], v) for k, v in shapes[0][2].items())


def test_sync_batchnorm_on_cpu():
    """One CPU process: nothing to sync, trained as Lightning trains it (its single-device strategy
    applies no layer sync); several CPU processes: refused before training (torch's SyncBatchNorm
    raises for CPU tensors)."""
    weights = []
    for framework in (pl, tm):
        framework.seed_everything(1)
        model = BatchNormNet.of(framework)()
        framework.Trainer(accelerator="cpu", devices=1, max_steps=3, sync_batchnorm=True, **QUIET).fit(model, loader())
        weights.append(model.state_dict())
    assert all(torch.equal(weights[1][k], v) for k, v in weights[0].items())
    with pytest.raises(ValueError, match="SyncBatchNorm runs on GPUs only"):
        tm.Trainer(accelerator="cpu", devices=2, strategy="ddp", sync_batchnorm=True, **QUIET)


def loader():
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=4)


class BatchNormNet:
    @staticmethod
    def of(framework):
        class Net(framework.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))

            def training_step(self, batch, batch_idx):
                return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Net


def test_accelerators_answer_as_lightnings():
    for name in ("CPUAccelerator", "CUDAAccelerator", "MPSAccelerator"):
        ours, theirs = getattr(tm_accelerators, name), getattr(pl_accelerators, name)
        assert (ours.name(), ours.is_available(), ours.auto_device_count()) == (
            theirs.name(),
            theirs.is_available(),
            theirs.auto_device_count(),
        )
    for devices in (1, 3, "2"):
        assert tm_accelerators.CPUAccelerator.parse_devices(devices) == pl_accelerators.CPUAccelerator.parse_devices(
            devices
        )
        assert tm_accelerators.CPUAccelerator.get_parallel_devices(
            devices
        ) == pl_accelerators.CPUAccelerator.get_parallel_devices(devices)
    assert tm.Trainer(accelerator=tm_accelerators.CPUAccelerator(), **QUIET).runtime.device_type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError) as lightning:
            pl_accelerators.find_usable_cuda_devices(2)
        with pytest.raises(ValueError) as trainmesh:
            tm_accelerators.find_usable_cuda_devices(2)
        assert str(trainmesh.value) == str(lightning.value)
    assert tm_accelerators.find_usable_cuda_devices(0) == pl_accelerators.find_usable_cuda_devices(0) == []


def test_parallel_strategy_is_lightnings_question():
    pairs = [("DDPStrategy", {}), ("FSDPStrategy", {}), ("SingleDeviceStrategy", {})]
    for name, options in pairs:
        ours = isinstance(getattr(tm_strategies, name)(**options), tm_strategies.ParallelStrategy)
        lightning = getattr(pl_strategies, name)
        assert ours == issubclass(lightning, pl_strategies.ParallelStrategy), name


def test_lightning_one_plugins_become_todays_strategies():
    with pytest.warns(LightningOneName, match="today: strategy=DDPStrategy"):
        plugin = tm_plugins.DDPPlugin(find_unused_parameters=True)
    trainer = tm.Trainer(accelerator="cpu", devices=2, plugins=plugin, **QUIET)
    assert isinstance(trainer.strategy, tm_strategies.DDPStrategy)
    assert trainer.strategy.ddp_options["find_unused_parameters"] is True
    with pytest.warns(LightningOneName, match="strategy='sharded'"):
        trainer = tm.Trainer(accelerator="cpu", devices=2, plugins="ddp_sharded", **QUIET)
    assert isinstance(trainer.strategy, tm_strategies.FSDPStrategy)
    with pytest.warns(LightningOneName):
        spawn = tm_plugins.DDPSpawnPlugin()
    assert spawn.init_arguments["start_method"] == "spawn"
    with pytest.warns(LightningOneName):
        assert tm_plugins.NativeMixedPrecisionPlugin(16, "cuda").precision == "16-mixed"
    with pytest.raises(ValueError, match="two strategies"), warnings.catch_warnings():
        warnings.simplefilter("ignore", LightningOneName)
        tm.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=tm_plugins.DDPPlugin(), **QUIET)


REFUSED_PLACES = (tm_plugins, tm_strategies, tm_accelerators, tm_loggers)


def test_every_refused_name_stops_with_its_reason():
    refused = [
        (place.__name__, name, value)
        for place in REFUSED_PLACES
        # vars() and the lazy names of __all__ (accelerators imports its classes on first use)
        for name in sorted(set(vars(place)) | set(getattr(place, "__all__", ())))
        if refusal_of(value := getattr(place, name)) is not None
    ]
    assert {"XLAAccelerator", "DeepSpeedStrategy", "XLAPrecision", "BaguaStrategy", "TPUSpawnPlugin"} <= {
        name for _, name, _ in refused
    }
    for _, name, value in refused:
        with pytest.raises((RefusedError, ModuleNotFoundError)) as error:
            value()
        if isinstance(error.value, RefusedError):
            assert refusal_of(value) in str(error.value), name


def _own_precision_classes(plugins):
    """Lightning's precision_expert page: ``class CustomPrecision(Precision)``, with and without methods."""

    class OnlyPrecision(plugins.MixedPrecision):
        precision = "bf16-mixed"

        def __init__(self):
            super().__init__("bf16-mixed", "cpu")

    class WithMethods(plugins.Precision):
        calls = []

        def convert_input(self, data):
            self.calls.append("convert_input")
            return super().convert_input(data)

        def pre_backward(self, tensor, module):
            self.calls.append("pre_backward")
            return super().pre_backward(tensor, module)

    return OnlyPrecision, WithMethods


def test_a_precision_plugin_of_ones_own_class_is_taken_for_its_precision_or_refused_where_it_has_methods():
    """Before: the methods were accepted and never called (Lightning calls them at every step)."""
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.models import quiet_trainer

    pl_only, pl_methods = _own_precision_classes(pl_plugins)
    tm_only, tm_methods = _own_precision_classes(tm_plugins)
    kwargs = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    assert tm.Trainer(plugins=[tm_only()], **kwargs).precision == pl.Trainer(plugins=[pl_only()], **kwargs).precision

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    pl.Trainer(max_epochs=1, plugins=[pl_methods()], **kwargs).fit(Module(), loader)
    assert pl_methods.calls == ["convert_input", "pre_backward"] * 2  # what Lightning does with them
    with pytest.raises(
        ValueError, match=r"WithMethods\(...\)\]: .*\(convert_input, pre_backward\) would not be called"
    ):
        quiet_trainer(max_epochs=1, plugins=[tm_methods()])
