"""Lightning 2.6's strategy arguments (strategies/lightning_arguments.py): each mapped to what
trainmesh's strategy does (inspected on the built strategy), or refused before training with what,
why and instead; the most used ones trained at world size 2 (one launch of
lightning_arguments_run.py) against their reference: torch's own DDP with the same comm hook, and
trainmesh's own spelling of the same FSDP2 layout.
"""

import functools
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import trainmesh as tm
from helpers.batches import Batches
from helpers.models import quiet_trainer
from trainmesh.precision import Precision
from trainmesh.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy, Placement, SingleDeviceStrategy

HERE = Path(__file__).parent
TWO_CPUS = Placement("cpu", (0, 1))
FT = tm.FaultTolerance("http://127.0.0.1:1", replica_group=0, num_replica_groups=2, host="127.0.0.1")


class Block(nn.Module):
    pass


# ---- construct and inspect --------------------------------------------------------------------
def test_ddp_takes_lightnings_comm_hook_and_passes_its_kwargs_to_torchs_ddp():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1)
    strategy = DDPStrategy(
        ddp_comm_state=state,
        ddp_comm_hook=powerSGD_hook.powerSGD_hook,
        ddp_comm_wrapper=default_hooks.fp16_compress_wrapper,
        broadcast_buffers=False,
        start_method="popen",  # Lightning's default: the script re-run per process, as trainmesh's "elastic"
        accelerator="cpu",
        parallel_devices=[torch.device("cpu"), torch.device("cpu")],
    ).with_placement(TWO_CPUS)
    assert strategy.comm_hook.hook is powerSGD_hook.powerSGD_hook
    assert strategy.comm_hook.state is state and strategy.comm_hook.wrapper is default_hooks.fp16_compress_wrapper
    assert strategy.ddp_options["broadcast_buffers"] is False
    assert strategy.start_method == "elastic"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"model_averaging_period": 4}, "post-local SGD"),
        ({"ddp_comm_wrapper": lambda hook: hook}, "without ddp_comm_hook"),
        ({"device_ids": [0]}, "sets DDP's device_ids itself"),
        ({"checkpoint_io": object()}, "Trainer(plugins=[checkpoint_io])"),
        ({"precision_plugin": object()}, "Trainer(precision=...)"),
        ({"cluster_environment": object()}, "Trainer(plugins=[environment])"),
    ],
)
def test_ddp_refuses_what_it_cannot_honour_at_construction(arguments, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        DDPStrategy(**arguments)


def test_hardware_that_differs_from_the_trainers_is_refused_when_the_trainer_places_the_strategy():
    with pytest.raises(ValueError, match="Trainer runs on 'cpu'"):
        DDPStrategy(accelerator="gpu").with_placement(TWO_CPUS)
    with pytest.raises(ValueError, match="differs from the Trainer's devices"):
        FSDPStrategy(parallel_devices=[torch.device("cpu")]).with_placement(TWO_CPUS)
    with pytest.raises(ValueError, match="Trainer's device 'cpu:0'"):
        SingleDeviceStrategy("cuda:1").with_placement(Placement("cpu", (0,)))
    assert SingleDeviceStrategy(device="cpu").with_placement(Placement("cpu", (0,))).root_device.type == "cpu"


def test_an_unknown_keyword_is_a_type_error_as_python_gives():
    for build in (DDPStrategy, FSDPStrategy, SingleDeviceStrategy, ModelParallelStrategy):
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            build(bogus=1)


def test_fsdp_maps_lightnings_policies_and_sharding_onto_its_own_options():
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, transformer_auto_wrap_policy

    strategy = FSDPStrategy(
        auto_wrap_policy={Block},
        activation_checkpointing_policy={Block},
        sharding_strategy="SHARD_GRAD_OP",
        state_dict_type="full",
        use_orig_params=True,
        limit_all_gathers=True,
    ).with_placement(TWO_CPUS)
    assert (strategy.wrap, strategy.activation_checkpointing) == ([Block], [Block])
    assert (strategy.reshard_after_forward, strategy.hybrid, strategy.name) == (False, False, "sharded")
    assert strategy.state_dict_type == "full"
    assert FSDPStrategy().state_dict_type == "full"  # Lightning 2.6's default: one file (before: "sharded")

    assert FSDPStrategy(auto_wrap_policy=ModuleWrapPolicy({Block})).wrap == [Block]
    partial = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    assert FSDPStrategy(auto_wrap_policy=partial).wrap == [Block]
    assert FSDPStrategy(activation_checkpointing=Block).activation_checkpointing == [Block]  # Lightning's old spelling
    assert FSDPStrategy(cpu_offload=CPUOffload(offload_params=True)).cpu_offload is True
    assert FSDPStrategy(sharding_strategy=ShardingStrategy.FULL_SHARD).name == "fsdp"

    hybrid = FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 2)).with_placement(
        Placement("cpu", (0, 1, 2, 3))
    )
    assert (hybrid.name, hybrid.shard_size, hybrid.reshard_after_forward) == ("hsdp", 2, True)
    assert hybrid.dims(4).dp_shard == 2
    with pytest.raises(ValueError, match="holds 6 processes, but the run has 4"):
        FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(3, 2)).dims(4)
    zero2 = FSDPStrategy(sharding_strategy="_HYBRID_SHARD_ZERO2")
    assert (zero2.name, zero2.reshard_after_forward) == ("hsdp", False)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"sharding_strategy": "NO_SHARD"}, "use strategy='ddp'"),
        ({"auto_wrap_policy": lambda module, recurse, nonwrapped_numel: True}, "pass the classes as a set"),
        ({"device_mesh": object()}, "pass the shape as a tuple"),
        ({"wrap": [Block], "auto_wrap_policy": {Block}}, "keep one spelling"),
        ({"reshard_after_forward": True, "sharding_strategy": "SHARD_GRAD_OP"}, "keep one spelling"),
        ({"use_orig_params": False}, "always keeps the original parameters"),
        ({"state_dict_type": "local"}, "use 'full' or 'sharded'"),
    ],
)
def test_fsdp_refuses_what_it_cannot_honour(arguments, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        FSDPStrategy(**arguments)


def test_fsdp_mixed_precision_is_accepted_only_where_it_is_the_trainers_precision():
    from torch.distributed.fsdp import MixedPrecision

    bf16 = Placement("cpu", (0, 1), precision=Precision("bf16-mixed", device_type="cpu"))
    same = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    assert FSDPStrategy(mixed_precision=same).with_placement(bf16).precision.name == "bf16-mixed"
    with pytest.raises(ValueError, match="takes the precision from the Trainer"):
        FSDPStrategy(mixed_precision=same).with_placement(TWO_CPUS)  # the Trainer's 32-true
    reduced_in_bf16 = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="reduces gradients in float32"):
        FSDPStrategy(mixed_precision=reduced_in_bf16).with_placement(bf16)


def test_lightnings_model_parallel_arguments_are_taken_and_checked():
    # Lightning's form is trained in tests/strategies/test_lightning_model_parallel.py; here what is refused
    ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2, save_distributed_checkpoint=False)
    with pytest.raises(ValueError, match="Give one form's arguments"):
        ModelParallelStrategy(tensor_parallel_size=2, tp=2)
    with pytest.raises(ValueError, match="positive number of processes or 'auto'"):
        ModelParallelStrategy(tensor_parallel_size=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tensor_parallel'"):
        ModelParallelStrategy(tensor_parallel=2)


# ---- trained ----------------------------------------------------------------------------------
def test_single_device_strategy_with_lightnings_device_trains_as_the_default():
    from ddp_run import Net, dataset
    from torch.utils.data import DataLoader

    trained = []
    for strategy in (SingleDeviceStrategy(device="cpu"), "auto"):
        model = Net()
        quiet_trainer(strategy=strategy, max_steps=4).fit(model, DataLoader(dataset(64), batch_size=16))
        trained.append(model.state_dict())
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])


def plan(root: Path):
    def leg(name, *args):
        return name, 2, [args[0], *args[1:], str(root / f"{name}.pt")], {}

    # ddp_hook first: its Trainer makes the process group torch_hook's hand-written DDP runs in.
    return [
        leg("ddp_hook", "ddp_hook"),
        leg("torch_hook", "torch_hook"),
        leg("fsdp-lightning", "fsdp", "lightning"),
        leg("fsdp-ours", "fsdp", "ours"),
    ]


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Batches:
    root = tmp_path_factory.mktemp("lightning_arguments")
    # A fork of the fork server (helpers/forked.py) and its workers forks of that: the legs import
    # Lightning there themselves, as a new interpreter would; none tests how processes start.
    return Batches(
        HERE / "lightning_arguments_run.py", root, plan(root), leg_timeout=180, cwd=HERE, forked=True, fork_workers=True
    )


def trained(legs, name):
    legs(name)
    return torch.load(legs.root / f"{name}.pt", weights_only=False)


def test_ddp_comm_hook_on_cpu_trains_as_lightnings_ddp_which_registers_it_on_cuda_only(legs):
    """Lightning's ``DDPStrategy._register_ddp_hooks`` registers the hook when its root device is CUDA; on
    CPU its run is torch's DDP without the hook. Before, trainmesh registered it on CPU too: an fp16 hook's
    weights 3.7e-4 from Lightning 2.6.6's, and ``bf16_compress_hook`` stopped with torch's TypeError where
    Lightning trains (/work/progs/l-ddp-progs6 i9)."""
    ours, reference = trained(legs, "ddp_hook")["state_dict"], trained(legs, "torch_hook")
    assert ours.keys() == reference["plain"].keys()
    assert all(torch.equal(ours[k], reference["plain"][k]) for k in ours)
    # The reference tells the two apart: fp16 gradients move the weights away from plain DDP's.
    assert any(not torch.equal(reference["hooked"][k], reference["plain"][k]) for k in ours)


def test_fsdp_in_lightnings_words_trains_as_trainmeshs_spelling_of_the_same_layout(legs):
    lightning, ours = trained(legs, "fsdp-lightning"), trained(legs, "fsdp-ours")
    # Three Block units and the root, each Block checkpointed, parameters kept whole to backward (ZeRO-2).
    expected = {"units": 4, "checkpointed": 3, "reshard_after_forward": False}
    assert lightning["facts"] == ours["facts"] == expected
    for key, value in ours["state_dict"].items():
        torch.testing.assert_close(lightning["state_dict"][key], value, rtol=0, atol=1e-6)
    # state_dict_type="full", Lightning's default and trainmesh's: one file of whole tensors, as trained.
    assert lightning["file"] and ours["file"]  # before: trainmesh's default wrote a directory
    for run in (lightning, ours):
        assert all(torch.equal(run["saved"][k], run["state_dict"][k]) for k in run["state_dict"])


def test_fsdps_default_checkpoint_is_one_file_as_lightnings_read_by_torch_load_and_load_from_checkpoint(legs):
    """``FSDPStrategy()``'s checkpoint (the "ours" leg: 2 processes, no ``state_dict_type``) is what
    Lightning 2.6.6's FSDPStrategy writes by default (its FSDP needs a GPU: compared with its code, fsdp.py
    ``save_checkpoint``/``optimizer_state``): one file from rank 0, the whole weights under the module's
    names, the optimizer state in torch's own numbered form (its ``rekey_optim_state_dict`` to parameter
    ids), and the checkpoint's other keys as any one-file save. Before: a directory, which ``torch.load``
    and ``load_from_checkpoint`` stop on with IsADirectoryError."""
    from lightning_arguments_run import Blocks, blocks_data
    from torch.utils.data import DataLoader

    ours = trained(legs, "fsdp-ours")
    path = legs.root / "fsdp-ours.ckpt"
    assert path.is_file()
    saved = torch.load(path, weights_only=False)
    single = quiet_trainer(max_steps=1, default_root_dir=legs.root)
    single.fit(Blocks(), DataLoader(blocks_data(16), batch_size=8))
    single.save_checkpoint(legs.root / "single.ckpt")
    assert sorted(saved) == sorted(torch.load(legs.root / "single.ckpt", weights_only=False))
    (optimizer,) = saved["optimizer_states"]
    names = [name for name, _ in Blocks().named_parameters()]
    (group,) = optimizer["param_groups"]
    assert group["params"] == list(range(len(names))) and group["param_names"] == names
    assert sorted(optimizer["state"]) == list(range(len(names)))
    for number, name in enumerate(names):  # whole moments, not one rank's shard
        assert optimizer["state"][number]["exp_avg"].shape == ours["state_dict"][name].shape, name
    model = Blocks()
    torch.optim.Adam(model.parameters()).load_state_dict(optimizer)  # torch's own optimizer reads it
    loaded = Blocks.load_from_checkpoint(path)
    for name, tensor in ours["state_dict"].items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_fsdps_full_save_shows_other_ranks_empty_states_and_its_resume_checks_shapes_without_a_gather(legs):
    """Lightning 2.6.6's FSDP gathers a "full" checkpoint with ``rank0_only`` (fsdp.py
    ``lightning_module_state_dict``/``optimizer_state``): ``on_save_checkpoint`` sees ``{}`` on ranks other
    than 0. Before, trainmesh gave them their shards there, and a resume gathered the whole model on rank 0
    only to check the file's names and shapes; the check now reads the shards' global shapes, and still
    refuses a file of another shape on every rank before loading it."""
    ours = trained(legs, "fsdp-ours")
    names = len(ours["state_dict"])
    # One save (trainer.save_checkpoint); rank 0 whole weights and optimizer state, rank 1 empty ones
    assert ours["seen"] == [[(names, [names])], [(0, [0])]]
    assert ours["gathers_at_resume"] == [[], []]
    for refused in ours["refused"]:
        assert "does not match this model" in refused and "head.weight: checkpoint (5, 32) vs model (4, 32)" in refused


def test_fault_tolerance_refuses_lightnings_hybrid_sharding_as_it_refuses_hybrid():
    for strategy in (FSDPStrategy(sharding_strategy="HYBRID_SHARD"), FSDPStrategy(device_mesh=(1, 2))):
        with pytest.raises(ValueError, match="replica groups are the replicated dimension"):
            quiet_trainer(strategy=strategy, devices=2, fault_tolerance=FT, max_steps=5)


def test_fault_tolerance_refuses_a_ddp_comm_hook_it_would_replace_on_cuda_only():
    """On CPU Lightning's DDPStrategy registers no comm hook and trains plain ddp, and so does a replica
    group, torchft's hook the only one (tests/strategies/fault_tolerance_run.py trains with one, equal to
    ddp); on CUDA the program's hook would replace torchft's. Before: refused on CPU too."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from trainmesh.strategies.fault_tolerance import FaultTolerantDDPStrategy

    hook = default_hooks.fp16_compress_hook
    assert quiet_trainer(strategy=DDPStrategy(ddp_comm_hook=hook), fault_tolerance=FT, max_steps=5).strategy.comm_hook
    with pytest.raises(ValueError, match="drop ddp_comm_hook"):
        FaultTolerantDDPStrategy(fault_tolerance=FT, placement=Placement("cuda", (0,)), ddp_comm_hook=hook)
