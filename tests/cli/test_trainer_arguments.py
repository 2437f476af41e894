"""``trainmesh fit --trainer.strategy``: a name, or a strategy class with its arguments, in the forms
Lightning 2.6's LightningCLI takes (a short class name with ``--trainer.strategy.<arg>``, or a config's
``class_path``/``init_args``, Lightning's ``lightning.pytorch.strategies.X`` read as trainmesh's X)."""

import pytest
import yaml

import trainmesh.cli.main as main_module
from trainmesh.cli.main import main
from trainmesh.strategies import DDPStrategy

_LIGHTNING_CONFIG = """
trainer:
  strategy:
    class_path: lightning.pytorch.strategies.DDPStrategy
    init_args:
      accelerator: null
      start_method: forkserver
"""
_FORMS = {
    "short_name": ["--trainer.strategy", "DDPStrategy", "--trainer.strategy.start_method", "forkserver"],
    "lightning_class_path_in_a_config": ["--config", "CONFIG"],
}


def _args(form, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(_LIGHTNING_CONFIG)
    return [str(config) if a == "CONFIG" else a for a in _FORMS[form]]


@pytest.mark.parametrize("form", _FORMS)
def test_print_config_writes_the_strategy_class_and_its_arguments(form, tmp_path, capsys):
    # before: the short name printed `strategy: [start_method, forkserver]` (a list) and the
    # Lightning class path was kept as Lightning's, with Lightning's init_args
    assert main(["fit", *_args(form, tmp_path), "--print_config"]) == 0
    strategy = yaml.safe_load(capsys.readouterr().out)["trainer"]["strategy"]
    assert strategy["class_path"] == "trainmesh.strategies.DDPStrategy"
    assert strategy["init_args"]["start_method"] == "forkserver"


@pytest.mark.parametrize("form", _FORMS)
def test_the_trainer_gets_the_strategy_object_built_from_its_arguments(form, tmp_path, monkeypatch):
    # before: the Trainer refused NestedArg(...) / the dict as "neither a strategy name nor a strategy object"
    seen = []
    monkeypatch.setattr(main_module, "_fit", lambda command, trainer, *rest: seen.append(trainer))
    assert main(["fit", *_args(form, tmp_path)]) == 0
    strategy = seen[0].strategy
    assert isinstance(strategy, DDPStrategy)
    assert strategy.start_method == "forkserver"
