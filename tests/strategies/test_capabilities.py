"""What each strategy states about itself (strategies/capabilities.py), read instead of its name,
and its constructor arguments kept whole when the Trainer builds it for its devices."""

from datetime import timedelta

from trainmesh.scaling.projection import modelled
from trainmesh.strategies import STRATEGIES, DDPStrategy, StrategyCapabilities, memory_models
from trainmesh.strategies.mesh import ParallelDims
from trainmesh.strategies.model_parallel_support import model_parallel_capabilities
from trainmesh.strategies.protocol import Placement


def _built(name: str):
    return STRATEGIES[name](placement=Placement("cpu", (0,) if name == "single" else (0, 1)))


def test_every_strategy_states_its_capabilities_as_one_value():
    stated = {name: _built(name).capabilities for name in STRATEGIES}
    assert all(isinstance(value, StrategyCapabilities) for value in stated.values())
    # Manual optimization: every strategy has a parity test (tests/trainer/test_manual_optimization_*.py).
    # Read before launch, as here, a model-parallel strategy states it for a mesh of one process; on
    # its own mesh a pipeline refuses it, and so do dp and ddp2 on several GPUs, saying why
    # (test_manual_optimization_split.py).
    assert all(value.manual_optimization and not value.manual_optimization_refusal for value in stated.values())
    assert {name for name, value in stated.items() if not value.inference_mode} == {
        "sharded",
        "fsdp",
        "hsdp",
        "tp",
        "pp",
        "fsdp_tp",
        "pp_replicate",
    }


def test_the_memory_models_are_the_strategies_own():
    assert sorted(memory_models()) == [
        "ddp",
        "ddp2",
        "ddp_fork",
        "ddp_spawn",
        "dp",
        "fsdp",
        "fsdp_tp",
        "hsdp",
        "pp",
        "sharded",
        "single",
        "tp",
        "zero1",
    ]
    assert memory_models()["sharded"].gathered_for_backward and memory_models()["tp"].splits_activations


class BucketedDDP(DDPStrategy):
    """A user's subclass with an argument of its own, which it does not hand to DDPStrategy."""

    def __init__(self, *, bucket_view: bool = False, **kwargs) -> None:
        super().__init__(gradient_as_bucket_view=bucket_view, **kwargs)
        self.bucket_view = bucket_view


def test_the_projection_and_keras_read_the_strategies_capabilities():
    # Formerly name tables (scaling/projection.py's MODELLED, keras/arguments.py's DATA_PARALLEL):
    # the same strategies now say so themselves.
    stated = {name: _built(name).capabilities for name in STRATEGIES}
    communication = [name for name, value in stated.items() if value.communication_model]
    assert communication == ["ddp", "ddp_spawn", "ddp_fork", "zero1", "sharded", "fsdp", "hsdp"]
    assert list(modelled()) == communication
    assert sorted(name for name, value in stated.items() if value.keras_fit) == [
        "ddp",
        "ddp_fork",
        "ddp_spawn",
        "single",
        "zero1",
    ]
    # keras/arguments.py's refusal says why for these, as it did from a list of names (read before
    # launch: a model-parallel strategy's dp_shard is 1 until its mesh is built).
    assert sorted(name for name, value in stated.items() if value.shards_parameters) == ["fsdp", "hsdp", "sharded"]


def test_the_1x_loops_the_trainer_side_and_keras_read_the_strategies_capabilities():
    # Formerly name tables and comparisons: optimizer_turns.py's and tbptt.py's _TESTED_STRATEGIES
    # ("single", "ddp": by the strategy's name, so ddp_spawn/ddp_fork and fault-tolerant ddp too),
    # keras/training.py's ``strategy.name == "zero1"``, checkpointing.py's ``is_dtensor`` on parameters.
    stated = {name: _built(name).capabilities for name in STRATEGIES}
    assert sorted(name for name, value in stated.items() if value.lightning1_loops) == [
        "ddp",
        "ddp_fork",
        "ddp_spawn",
        "single",
    ]
    keras = [name for name, value in stated.items() if value.keras_fit and value.shards_optimizer_state]
    assert keras == ["zero1"]
    assert sorted(name for name, value in stated.items() if value.splits_parameters) == ["fsdp", "hsdp", "sharded"]
    two_ways = model_parallel_capabilities(ParallelDims(tp=2, dp_shard=1).resolved(2), replicated=False)
    assert two_ways.splits_parameters and not two_ways.shards_parameters  # tensor-parallel pieces are DTensors


def test_a_strategy_built_for_the_run_keeps_every_argument_a_subclass_was_given():
    mine = BucketedDDP(bucket_view=True, timeout=timedelta(minutes=3))
    again = mine.with_placement(Placement("cpu", (0, 1)))
    assert type(again) is BucketedDDP and again.bucket_view and again.ddp_options["gradient_as_bucket_view"]
    assert again.timeout == timedelta(minutes=3) and again.placement.devices == (0, 1)
