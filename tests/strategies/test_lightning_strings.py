"""Lightning's strategy strings (``Trainer(strategy="ddp_find_unused_parameters_true")``) as Lightning
defines them: every name of Lightning 2.6's registry and of pytorch-lightning 1.9.5's builds the
strategy with the same options (read from Lightning's own registry), or is refused with the reason."""

from __future__ import annotations

import pytest

from trainmesh.strategies import DDPStrategy, FSDPStrategy, Placement, SingleDeviceStrategy, build_strategy
from trainmesh.strategies.lightning_strings import REFUSED_STRATEGIES

# pytorch-lightning 1.9.5's registry, recorded with
# /work/ref/pl19/bin/python -c "from pytorch_lightning.strategies import StrategyRegistry as R;
# print(sorted(R.available_strategies()))"
LIGHTNING_1_9_STRATEGIES = (
    "bagua colossalai ddp ddp_find_unused_parameters_false ddp_fork ddp_fork_find_unused_parameters_false "
    "ddp_fully_sharded ddp_notebook ddp_notebook_find_unused_parameters_false ddp_sharded "
    "ddp_sharded_find_unused_parameters_false ddp_sharded_spawn ddp_sharded_spawn_find_unused_parameters_false "
    "ddp_spawn ddp_spawn_find_unused_parameters_false deepspeed deepspeed_stage_1 deepspeed_stage_2 "
    "deepspeed_stage_2_offload deepspeed_stage_3 deepspeed_stage_3_offload deepspeed_stage_3_offload_nvme dp fsdp "
    "fsdp_native fsdp_native_full_shard_offload horovod hpu_parallel hpu_single ipu_strategy single_device "
    "single_tpu tpu_spawn tpu_spawn_debug"
).split()

TWO = Placement("cpu", (0, 1))
# Lightning's start method "popen" re-runs the script once per process: trainmesh's "elastic".
START = {"popen": "elastic", "spawn": "spawn", "fork": "fork"}


def _lightning_registry() -> dict[str, dict]:
    from lightning.pytorch.strategies import StrategyRegistry

    return {name: dict(StrategyRegistry[name]) for name in StrategyRegistry.available_strategies()}


def test_every_lightning_2_6_strategy_string_builds_lightning_s_options_or_is_refused() -> None:
    pytest.importorskip("lightning")
    for name, entry in _lightning_registry().items():
        kind, options = entry["strategy"].__name__, entry["init_params"]
        if name in REFUSED_STRATEGIES:
            assert kind not in ("DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy"), name
            continue
        built = build_strategy(name, TWO if kind != "SingleDeviceStrategy" else Placement("cpu", (0,)))
        if kind == "DDPStrategy":
            assert type(built) is DDPStrategy, name
            assert built.start_method == START[options.get("start_method", "popen")], name
            # not given: None, the module's generation decides at setup (2.x False, 1.x True: strategies/ddp.py)
            assert built.ddp_options["find_unused_parameters"] is options.get("find_unused_parameters"), name
        elif kind == "FSDPStrategy":
            assert type(built) is FSDPStrategy, name
            assert built.cpu_offload is options.get("cpu_offload", False), name
        else:
            assert kind == "SingleDeviceStrategy" and type(built) is SingleDeviceStrategy, name


def test_every_lightning_1_9_strategy_string_builds_or_is_refused() -> None:
    for name in LIGHTNING_1_9_STRATEGIES:
        if name in REFUSED_STRATEGIES:
            with pytest.raises(ValueError, match="is Lightning's, but .* not supported|no DeepSpeed"):
                build_strategy(name, TWO)
            continue
        built = build_strategy(name, Placement("cpu", (0,)) if name == "single_device" else TWO)
        assert isinstance(built, (DDPStrategy, FSDPStrategy, SingleDeviceStrategy)) or name == "dp", name
    # 1.9's spawned sharded strategy spawns, and its sharded ones keep parameters gathered (ZeRO-2).
    spawned = build_strategy("ddp_sharded_spawn", TWO)
    assert isinstance(spawned, FSDPStrategy) and spawned.start_method == "spawn"
    assert spawned.reshard_after_forward is False
    assert build_strategy("fsdp_native_full_shard_offload", TWO).cpu_offload is True


@pytest.mark.parametrize("name", ["deepspeed_stage_2", "xla", "horovod"])
def test_a_strategy_string_trainmesh_cannot_run_says_why_and_what_to_use(name: str) -> None:
    import trainmesh as tm

    with pytest.raises(ValueError, match=rf"strategy='{name}' is Lightning's, but .*; use strategy='ddp'"):
        tm.Trainer(strategy=name, accelerator="cpu", devices=2, logger=False, enable_checkpointing=False)


def test_the_trainer_takes_lightning_s_find_unused_parameters_string() -> None:
    import trainmesh as tm

    trainer = tm.Trainer(
        strategy="ddp_find_unused_parameters_true",
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_checkpointing=False,
    )
    assert isinstance(trainer.strategy, DDPStrategy)
    assert trainer.strategy.ddp_options["find_unused_parameters"] is True


@pytest.mark.parametrize("name", ["tpu", "hpu", "ipu"])
def test_lightning_s_accelerators_for_other_hardware_are_refused_with_the_reason(name: str) -> None:
    from trainmesh.accelerators import resolve_accelerator

    with pytest.raises(ValueError, match=rf"accelerator='{name}' is Lightning's, but .* not supported by trainmesh"):
        resolve_accelerator(name)


def test_lightning_1_9_s_spawned_sharded_classes_spawn_as_in_1_9() -> None:
    import warnings

    from trainmesh.plugins import DDPSpawnShardedPlugin
    from trainmesh.strategies import DDPSpawnShardedStrategy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for made in (DDPSpawnShardedStrategy(), DDPSpawnShardedPlugin()):
            assert isinstance(made, FSDPStrategy) and made.start_method == "spawn"
            assert made.reshard_after_forward is False


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])  # Lightning refuses fsdp on CPU
def test_the_strategy_tells_its_processes_per_node_as_lightning_s(strategy: str) -> None:
    """``trainer.strategy.num_processes``, which Lightning's ImageNet example divides its batch size
    by in ``setup`` (trainmesh's strategies had no such attribute: AttributeError under ddp_spawn)."""
    pl = pytest.importorskip("lightning.pytorch")
    import trainmesh as tm

    theirs = pl.Trainer(strategy=strategy, devices=2, accelerator="cpu", logger=False).strategy.num_processes
    ours = tm.Trainer(strategy=strategy, devices=2, accelerator="cpu", logger=False).strategy.num_processes
    assert ours == theirs == 2
    # Lightning 1.x's Trainer(num_processes=2): its spelling of accelerator="cpu", devices=2
    with pytest.warns(Warning, match="num_processes=2 is Lightning 1.x's spelling"):
        legacy = tm.Trainer(strategy=strategy, num_processes=2, logger=False)
    assert legacy.strategy.num_processes == theirs
