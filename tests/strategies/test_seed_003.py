"""Seed 003's two model-parallel setups, in trainmesh's spelling (the model is seed_003_run.Net).

(a) single-machine model parallel: one process, the model's layers on different devices,
    activations moved between them: ``Trainer(devices=2, strategy="layers_on_devices")``. On
    CPU both "devices" are the CPU, so the tests check the cut and that every part's hook moved
    its inputs to its own device on every forward; the placement on cuda:0 / cuda:1 is checked
    by a CUDA test (skipped without two GPUs).
(b) distributed model and data parallel: each machine holds the model split over its devices,
    the machines are replicas: ``Trainer(devices=2, num_nodes=2, strategy="pp_replicate")``,
    run as two torchrun "nodes" on 127.0.0.1 with two processes each (forks with torchrun's variables).
Every run is compared with one process training the same model on the same global batches.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import trainmesh as tm
from trainmesh.strategies import LayersOnDevicesStrategy, Placement
from trainmesh.strategies import layers_on_devices as lod
from trainmesh.strategies.pipeline_cut import split_parts

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import seed_003_run as run  # noqa: E402

from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.processes import run_program  # noqa: E402

STEPS = run.EPOCHS * 64 // run.GLOBAL_BATCH  # 8 optimizer steps
VAL_BATCHES = run.EPOCHS * 32 // run.GLOBAL_BATCH  # 4 validation forwards


def assert_same_weights(got: dict, expected: dict, atol: float) -> float:
    assert got.keys() == expected.keys()
    worst = max((got[k].float() - expected[k].float()).abs().max().item() for k in expected)
    assert worst <= atol, f"largest weight difference {worst:.3g} > {atol}"
    return worst


def weights_of(module: torch.nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


@pytest.fixture(scope="module")
def reference() -> dict:
    """One process, one device, global batch 16: what every layout must reproduce."""
    trainer, model = run.fit()
    assert trainer.global_step == STEPS
    initial = weights_of(run.Net())
    assert all(not torch.equal(v, initial[k]) for k, v in weights_of(model).items()), "every layer trained"
    return {"weights": weights_of(model), "val_loss": trainer.callback_metrics["val_loss"]}


@pytest.fixture(scope="module")
def replicas_reference() -> dict:
    """One process at global batch 16 reading, at each step, what the Trainer's shuffling sampler
    deals pp_replicate's two replicas: the reference of (b), with validation."""
    trainer, model = run.fit(as_replicas=run.REPLICAS)
    return {"weights": weights_of(model), "val_loss": trainer.callback_metrics["val_loss"]}


@pytest.fixture(scope="module")
def reference_without_validation() -> dict:
    """(b)'s reference (the replicas' shuffled batches) without the validation loader."""
    trainer, model = run.fit(validate=False, as_replicas=run.REPLICAS)
    return {"weights": weights_of(model)}


# ---- (a) single-machine model parallel ------------------------------------------------------
class HookSpy:
    """Records, in order, every move the strategy's hooks make: (what, target device).

    ``device_for`` is made to answer ``cpu:<index>`` so that the CPU run's two "devices" are
    told apart in the record (a tensor moved to cpu:1 is an ordinary CPU tensor).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.moves: list[tuple[str, torch.device]] = []
        self.names: dict[int, str] = {}
        inputs_to, output_to = lod._inputs_to, lod._output_to

        def spying_inputs_to(device):
            move = inputs_to(device)

            def hook(module, args, kwargs):
                self.moves.append((self.names.get(id(module), "?"), device))
                return move(module, args, kwargs)

            return hook

        def spying_output_to(device):
            move = output_to(device)

            def hook(module, args, output):
                self.moves.append(("output", device))
                return move(module, args, output)

            return hook

        monkeypatch.setattr(lod, "_inputs_to", spying_inputs_to)
        monkeypatch.setattr(lod, "_output_to", spying_output_to)
        monkeypatch.setattr(lod, "device_for", lambda device_type, index: torch.device(device_type, index))

    def name_parts(self, module: torch.nn.Module) -> None:
        self.names.update({id(m): name for name, m in module.named_modules()})


@pytest.mark.parametrize("strategy", ["layers_on_devices", "split_points"])
def test_layers_on_devices_trains_exactly_like_one_device(reference, monkeypatch, strategy):
    spy = HookSpy(monkeypatch)
    model = run.Net()
    spy.name_parts(model)
    # The cut: seq1's layer is part 0 (device 0), seq2's part 1 (device 1), balanced by
    # parameter count (110 vs 55) or named.
    assert split_parts(model, 2, None) == [["seq1.0"], ["seq2.0"]]
    choice = (
        "layers_on_devices" if strategy == "layers_on_devices" else LayersOnDevicesStrategy(split_points=["seq2.0"])
    )
    trainer, model = run.fit(devices=2, strategy=choice, model=model)

    assert isinstance(trainer.strategy, LayersOnDevicesStrategy)
    assert trainer.world_size == 1 and trainer.strategy.devices == [torch.device("cpu", 0), torch.device("cpu", 1)]
    # Every forward (8 training steps, 4 validation batches) moved seq1's input to device 0,
    # seq2's to device 1, and the output back to device 0, in that order.
    one_forward = [
        ("seq1.0", torch.device("cpu", 0)),
        ("seq2.0", torch.device("cpu", 1)),
        ("output", torch.device("cpu", 0)),
    ]
    assert spy.moves == one_forward * (STEPS + VAL_BATCHES)
    assert trainer.global_step == STEPS
    assert_same_weights(weights_of(model), reference["weights"], atol=0.0)
    assert trainer.callback_metrics["val_loss"] == reference["val_loss"]


def test_split_point_may_name_a_container_as_the_docstring_spells_it():
    strategy = LayersOnDevicesStrategy(split_points=["seq2"]).with_placement(Placement("cpu", (0, 1)))
    model = run.Net()
    strategy.setup_module(model)  # cuts before seq2's first member: the same cut as "seq2.0"
    assert split_parts(run.Net(), 2, ["seq2"]) == split_parts(run.Net(), 2, ["seq2.0"]) == [["seq1.0"], ["seq2.0"]]


def test_runtime_loop_matches_a_plain_torch_loop():
    """The seed's own loop shape (forward, loss, backward, step) through trainmesh.Runtime."""
    train, _ = run.loaders(run.GLOBAL_BATCH)

    plain = run.Net()
    optimizer = torch.optim.Adam(plain.parameters(), lr=1e-2)
    for _ in range(run.EPOCHS):
        for x, y in train:
            optimizer.zero_grad()
            F.mse_loss(plain(x), y).backward()
            optimizer.step()

    runtime = tm.Runtime(accelerator="cpu", devices=2, strategy="layers_on_devices")
    model = run.Net()
    model, optimizer = runtime.setup(model, torch.optim.Adam(model.parameters(), lr=1e-2))
    loader = runtime.setup_dataloaders(train)
    for _ in range(run.EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            runtime.backward(F.mse_loss(model(x), y))
            optimizer.step()
    assert isinstance(runtime.strategy, LayersOnDevicesStrategy)
    assert_same_weights(weights_of(model), weights_of(plain), atol=0.0)


class DeviceProbe(run.Net):
    """Net recording where its activations are: the halves' outputs, the step's output and batch."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set] = {}

    def _saw(self, what: str, tensor: torch.Tensor) -> None:
        self.seen.setdefault(what, set()).add(tensor.device)

    def forward(self, x):
        hidden = self.seq1(x)
        self._saw("seq1 output", hidden)
        out = self.seq2(hidden)
        self._saw("seq2 output", out)
        return out

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self(x)
        self._saw("batch", x)
        self._saw("model output", out)
        return F.mse_loss(out, y)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_layers_on_two_gpus_places_the_halves_and_trains_like_one_gpu():
    trainer, model = run.fit(accelerator="gpu", devices=2, strategy="layers_on_devices", model=DeviceProbe())
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert {p.device for p in model.seq1.parameters()} == {cuda0}
    assert {p.device for p in model.seq2.parameters()} == {cuda1}
    # seq1 ran on cuda:0, seq2 on cuda:1, and the output came back to the batch's cuda:0.
    assert model.seen == {"seq1 output": {cuda0}, "seq2 output": {cuda1}, "batch": {cuda0}, "model output": {cuda0}}

    one_trainer, one = run.fit(accelerator="gpu", devices=1)
    assert {p.device for p in one.parameters()} == {cuda0}
    assert_same_weights(weights_of(model), weights_of(one), atol=1e-6)
    assert abs(trainer.callback_metrics["val_loss"] - one_trainer.callback_metrics["val_loss"]) <= 1e-6


# ---- (b) distributed model and data parallel ------------------------------------------------
@pytest.fixture(scope="module")
def pp_replicate_runs(tmp_path_factory) -> dict[bool, list[dict]]:
    """validate -> every rank's result: both fits in one launch of two nodes (one process group;
    the fit without validation first). The nodes' four workers are forks of the fork server with
    the variables two torchrun agents of two workers each give theirs (helpers/forked.py's
    ``torchrun`` with ``nodes=2``): the test is about where the ranks sit and what they compute,
    not about how torchrun starts them (real torchrun nodes: test_ddp.py's ``torchrun_nodes``)."""
    out = tmp_path_factory.mktemp("pp_replicate") / "pp_replicate.pt"
    args = ["pp_replicate", str(out), "val=0,1"]
    if can_fork():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RUN_TIMEOUT": "300"}
        done = run_forked(
            HERE / "seed_003_run.py", args, env=env, timeout=300, cwd=HERE, world=4, torchrun=True, nodes=2
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    else:  # no fork server: two real torchrun nodes of two workers each
        run_torchrun_nodes(args, nodes=2, per_node=2, timeout=300)
    return {
        validate: [torch.load(f"{out}-val{int(validate)}.rank{rank}") for rank in range(4)]
        for validate in (False, True)
    }


def run_torchrun_nodes(leg: list[str], *, nodes: int, per_node: int, timeout: float) -> None:
    """``nodes`` torchrun agents on 127.0.0.1, ``per_node`` workers each, all at once."""
    from trainmesh.launchers.environments import find_free_port

    port = str(find_free_port())
    env = {"RUN_TIMEOUT": str(int(timeout))}

    def node(rank: int) -> subprocess.CompletedProcess:
        torchrun = ["--nnodes", str(nodes), "--nproc-per-node", str(per_node), "--node-rank", str(rank)]
        torchrun += ["--master-addr", "127.0.0.1", "--master-port", port, str(HERE / "seed_003_run.py"), *leg]
        return run_program(["-m", "torch.distributed.run", *torchrun], timeout=timeout, env=env, cwd=HERE)

    with ThreadPoolExecutor(nodes) as pool:  # each waits for the others at the rendezvous
        for done in list(pool.map(node, range(nodes))):
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def assert_pipeline_within_each_node(ranks: list[dict]) -> None:
    """Ranks 0, 1 (node 0) hold stages 0, 1 of replica 0; ranks 2, 3 (node 1) those of replica 1."""
    held = {0: ["seq1.0.weight", "seq1.0.bias"], 1: ["seq2.0.weight", "seq2.0.bias"]}
    for rank, result in enumerate(ranks):
        place = result["place"]
        node, local = divmod(rank, 2)
        assert place["strategy"] == "ModelParallelStrategy"
        assert place["dims"] == {"pp": 2, "dp_replicate": 2, "dp_shard": 1, "tp": 1}
        assert (place["global_rank"], place["node_rank"], place["env_group_rank"], place["local_rank"]) == (
            rank,
            node,
            node,
            local,
        )
        assert (place["pp"], place["dp_replicate"], place["dp_rank"]) == (local, node, node)
        assert place["pp_group"] == [2 * node, 2 * node + 1], "a pipeline's stages are on one node"
        assert place["replica_group"] == [local, local + 2], "a stage's replicas are one per node"
        assert place["parameters"] == held[local]
    for rank in range(4):  # and the stages of one pipeline really are on the same node
        assert {ranks[r]["place"]["node_rank"] for r in ranks[rank]["place"]["pp_group"]} == {rank // 2}


@pytest.mark.slow
def test_pp_replicate_on_two_nodes_trains_like_one_process(pp_replicate_runs, reference_without_validation):
    ranks = pp_replicate_runs[False]
    assert_pipeline_within_each_node(ranks)
    for result in ranks:  # every rank's gathered model: the two replicas agree exactly
        assert_same_weights(result["state_dict"], ranks[0]["state_dict"], atol=0.0)
    worst = assert_same_weights(ranks[0]["state_dict"], reference_without_validation["weights"], atol=1e-5)
    print(f"pp_replicate vs one process, largest weight difference: {worst:.3g}")


@pytest.mark.slow
def test_pp_replicate_on_two_nodes_validates_like_one_process(pp_replicate_runs, replicas_reference):
    reference = replicas_reference
    ranks = pp_replicate_runs[True]
    assert_pipeline_within_each_node(ranks)
    worst = assert_same_weights(ranks[0]["state_dict"], reference["weights"], atol=1e-5)
    val_losses = [result["metrics"]["val_loss"] for result in ranks]
    # Logged without sync_dist: each replica keeps its own mean (Lightning's rule), shared by its
    # pipeline's ranks; the replicas read 16 of the 32 samples each, so their mean is one process's.
    assert val_losses[0] == val_losses[1] and val_losses[2] == val_losses[3], val_losses
    mean = sum(val_losses) / len(val_losses)
    assert abs(mean - reference["val_loss"]) <= 1e-5, (val_losses, reference["val_loss"])
    print(f"pp_replicate vs one process: weights {worst:.3g}, val_loss {val_losses[0]} vs {reference['val_loss']}")
