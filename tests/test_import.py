"""``import trainmesh`` stays light: heavy and optional dependencies are imported where they are
used (benchmarks/import_time.py measures the time; this checks what gets imported)."""

import json
import os
import subprocess
import sys

import pytest

HEAVY_OR_OPTIONAL = ("torch.distributed.tensor", "sympy", "keras", "tensorboard", "sklearn", "rich", "jsonargparse")


# One fresh interpreter (this one has imported whatever other tests needed) for what needs no torch:
# the modules `import trainmesh` imports, then `python -m trainmesh --help` and `--version` (the
# console script runs the same main), each with its exit status and whether torch was imported by then.
_LIGHT = """
import contextlib, io, json, runpy, sys
import trainmesh
seen = {'modules': sorted(sys.modules)}
for argument in ('--help', '--version'):
    sys.argv, printed = ['trainmesh', argument], io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_module('trainmesh', run_name='__main__')
    except SystemExit as exit_:
        seen[argument] = (exit_.code, 'torch' in sys.modules, printed.getvalue())
print(json.dumps(seen))
"""


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ}, check=False
    )


@pytest.fixture(scope="module")
def light() -> dict:
    result = _fresh(_LIGHT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("module", (*HEAVY_OR_OPTIONAL, "torch"))
def test_import_trainmesh_does_not_import(module, light):
    assert module not in light["modules"], f"import trainmesh imports {module}; import it where it is used"


@pytest.mark.parametrize("argument", ["--help", "--version"])
def test_the_command_line_answers_help_and_version_without_importing_torch(argument, light):
    # The commands' list and the version need neither torch nor the Trainer (it took 1.8 s of
    # CPU, torch's 1.4 s included).
    code, torch_imported, printed = light[argument]
    assert (code, torch_imported) == (0, False), light[argument]
    if argument == "--version":
        from trainmesh.version import __version__

        assert printed.strip() == f"trainmesh {__version__}"
    else:
        assert "{fit,validate,test,predict,checkpoint,estimate,scale,project}" in printed


# What touching `tm.Trainer` must not import: the strategies a run may not use (each imported when
# a run builds it, by name: strategies/registry.py), their torch.distributed submodules, optional
# integrations, the tuner, the unused callbacks and the launchers that start other processes.
NOT_WITH_THE_TRAINER = (
    "torch.distributed.checkpoint",
    "torch.distributed.pipelining",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "lightning",
    "pytorch_lightning",
    "keras",
    "tensorboard",
    "trainmesh.strategies.ddp",
    "trainmesh.strategies.fsdp",
    "trainmesh.strategies.fault_tolerance",
    "trainmesh.strategies.model_parallel",
    "trainmesh.strategies.pipeline",
    "trainmesh.strategies.tensor_parallel",
    "trainmesh.strategies.layers_on_devices",
    "trainmesh.callbacks.pruning",
    "trainmesh.callbacks.early_stopping",
    "trainmesh.callbacks.prediction_writer",
    "torch.nn.utils.prune",
    "trainmesh.tuner",
    "trainmesh.launchers.elastic",
    "trainmesh.launchers.spawn",
    # Issue 38 (import time): what only some runs use, imported where it is used.
    *(
        "trainmesh.checkpoint.distributed",  # DCP's reader and writer: a sharded checkpoint's
        "trainmesh.checkpoint.shard_digest",
        "trainmesh.plugins",  # Trainer(plugins=...)
        "trainmesh.strategies.pipeline_cut",  # a model built on the meta device
        "trainmesh.strategies.stand_ins",
        "trainmesh.strategies.gradients",
        "trainmesh.supervision.stall_report",  # the watchdog's verdict: once a watch starts
        "trainmesh.supervision.call_site",  # several processes only
        "trainmesh.supervision.departure_report",
        "trainmesh.supervision.stop_agreement",
        "trainmesh.trainer.lightning1.optimizer_turns",  # Lightning 1.x's runners: when a fit starts
        "trainmesh.trainer.lightning1.tbptt",
        "trainmesh.trainer.lightning1.tune",
        "trainmesh.trainer.lightning1.argparse_arguments",
        "trainmesh.utilities.argparse",
        "trainmesh.utilities.parsing",
        "trainmesh.trainer.loop_views",  # trainer.fit_loop and the like
        "trainmesh.callbacks.progress",  # with the bar itself
        "trainmesh.callbacks.finders",
        "trainmesh.utilities.combined_loader",
        "trainmesh.trainer.worker_outcome",  # a spawned worker's report
        "trainmesh.utilities.distributed_samplers",
        "trainmesh.accelerator_types",
        "trainmesh.utilities.distributed",  # Lightning 1.x's module of that name (and its AllGatherGrad)
        "trainmesh.utilities.all_gather_grad",
    ),
)
# What a default `tm.Trainer()` must not import either (issue 38): the constructor builds the
# strategy, the default callbacks and the logger it uses, nothing only another run uses.
NOT_IN_A_PLAIN_FIT = (  # what a one-device fit without them does not import either (issue 38)
    "trainmesh.checkpoint.distributed",
    "trainmesh.plugins",
    "trainmesh.strategies.pipeline_cut",
    "trainmesh.supervision.call_site",
    "trainmesh.supervision.departure_report",
    "trainmesh.supervision.stop_agreement",
    "trainmesh.trainer.lightning1.tune",
    "trainmesh.trainer.lightning1.argparse_arguments",
    "trainmesh.utilities.argparse",  # with the DataModule's 1.x argparse classmethods
    "trainmesh.utilities.parsing",
    "trainmesh.datamodule",
    "trainmesh.trainer.loop_views",
    "trainmesh.callbacks.finders",
    "trainmesh.callbacks.early_stopping",
    "trainmesh.utilities.combined_loader",
    "trainmesh.utilities.distributed_samplers",
    "trainmesh.accelerator_types",  # accelerator="auto": a string
    "trainmesh.trainer.worker_outcome",
    "trainmesh.loggers.mlflow",
    "trainmesh.loggers.wandb",
)
NOT_WITH_A_DEFAULT_TRAINER = tuple(
    name
    for name in NOT_WITH_THE_TRAINER
    if name not in ("trainmesh.callbacks.progress", "trainmesh.strategies.gradients")  # the bar; clipping
) + ("trainmesh.loggers.mlflow", "trainmesh.loggers.wandb")
_STAGES = """
import json, sys
def modules():
    return sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'trainmesh', 'lightning',
        'pytorch_lightning', 'keras', 'tensorboard'))
seen = {}
import trainmesh as tm
tm.Trainer
seen['trainer'] = modules()
tm.Trainer()
seen['constructed'] = modules()
import tempfile, torch
class Net(tm.Module):  # a plain fit: one device, a loss logged, the default callbacks and logger
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log('loss', loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)
tm.Trainer(max_steps=1, default_root_dir=tempfile.mkdtemp(), enable_model_summary=False, log_every_n_steps=1).fit(Net(), loader)
seen['fit'] = modules()
from trainmesh.strategies import Placement, build_strategy
seen['single'] = (type(build_strategy('single', Placement('cpu', (0,)))).__name__, modules())
seen['ddp'] = (type(build_strategy('ddp', Placement('cpu', (0, 1)))).__name__, modules())
for package in ('trainmesh.strategies', 'trainmesh.callbacks'):  # every public name, imported on first use
    names = {}
    exec(f'from {package} import *', names)
    seen[package] = sorted(set(sys.modules[package].__all__) - set(names))
# Each name of __all__ (and a subpackage used as an attribute) is there when first touched,
# `from trainmesh import *` included; an unknown name is an AttributeError.
names = {'aliases': [tm.LightningModule is tm.Module, tm.LightningDataModule is tm.DataModule,
                     tm.callbacks.ModelCheckpoint.__module__.split('.')[0:2]]}
star = {}
exec('from trainmesh import *', star)
names['star'] = [name for name in tm.__all__ if getattr(tm, name) is not star.get(name)]
names['not_in_dir'] = sorted(set(tm.__all__) - set(dir(tm)))
try:
    tm.no_such_name
except AttributeError as error:
    names['unknown'] = str(error)
seen['names'] = names
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def modules_by_stage() -> dict:
    # A fresh interpreter (one for every check below), as light; the one that imports torch and fits.
    return json.loads(_fresh(_STAGES).stdout.splitlines()[-1])  # the last line: the fit's bar prints before it


@pytest.mark.parametrize("module", NOT_WITH_THE_TRAINER)
def test_the_trainer_does_not_import(module, modules_by_stage):
    assert module not in modules_by_stage["trainer"], f"tm.Trainer imports {module}; import it where it is used"


@pytest.mark.parametrize("module", NOT_WITH_A_DEFAULT_TRAINER)
def test_a_default_trainer_does_not_import(module, modules_by_stage):
    assert module not in modules_by_stage["constructed"], f"tm.Trainer() imports {module}; import it where it is used"


@pytest.mark.parametrize("module", NOT_IN_A_PLAIN_FIT)
def test_a_plain_fit_does_not_import(module, modules_by_stage):
    assert module not in modules_by_stage["fit"], f"a plain fit imports {module}; import it where it is used"


def test_a_named_strategy_imports_its_own_module_only(modules_by_stage):
    # The registry imports a strategy's module when its name is looked up: "single" imports none
    # of the distributed strategies, "ddp" not FSDP's, the pipeline's nor DCP's.
    single, after_single = modules_by_stage["single"]
    ddp, after_ddp = modules_by_stage["ddp"]
    assert (single, ddp) == ("SingleDeviceStrategy", "DDPStrategy")
    assert "trainmesh.strategies.single" in after_single
    assert "trainmesh.strategies.ddp" not in after_single
    assert "trainmesh.strategies.ddp" in after_ddp
    for module in ("trainmesh.strategies.fsdp", "trainmesh.strategies.pipeline", "torch.distributed.checkpoint"):
        assert module not in after_ddp, f"strategy='ddp' imports {module}"


def test_the_package_s_names_are_imported_on_first_use(modules_by_stage):
    # `import trainmesh` imports no torch (test_import_trainmesh_does_not_import[torch]); each name
    # of __all__ resolves on first use, `from trainmesh import *` included (at the end of _STAGES:
    # the names its stages touched first crash the stages if they do not resolve).
    names = modules_by_stage["names"]
    assert names["aliases"] == [True, True, ["trainmesh", "callbacks"]]
    assert names["star"] == [] and names["not_in_dir"] == []
    assert names["unknown"] == "module 'trainmesh' has no attribute 'no_such_name'"


@pytest.mark.parametrize("package", ["trainmesh.strategies", "trainmesh.callbacks"])
def test_every_public_name_of_a_lazy_package_is_importable(package, modules_by_stage):
    assert modules_by_stage[package] == [], f"from {package} import * misses {modules_by_stage[package]}"
