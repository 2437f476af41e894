"""FaultTolerance(sync="local_sgd" | "diloco"): replica groups that meet every sync_every steps,
through torchft's own LocalSGD and DiLoCo.

One launch (semi_sync_run.py, two groups of one process, seven lighthouses) serves every trained
check: the Trainer under DiLoCo against a hand-written loop around torchft's DiLoCo, H=1 LocalSGD
with SGD against one process at the global batch, and a DiLoCo run resumed mid-interval against
the same run uninterrupted, Streaming DiLoCo (fragments=2) against a hand-written loop around
torchft's DiLoCo over the same fragments, and that run resumed mid-interval against it
uninterrupted. The refusals need no launch.
"""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.forked import can_fork, run_forked
from helpers.lightning_order import GlobalBatches
from helpers.models import TutorialModule, loaders, quiet_trainer

HERE = Path(__file__).parent
SCRIPT = HERE / "semi_sync_run.py"
sys.path.insert(0, str(HERE))
import semi_sync_run as run  # noqa: E402  (the launched program: its model, data and step counts)

try:
    import torchft  # noqa: F401

    HAS_TORCHFT = True
except ImportError:
    HAS_TORCHFT = False


def _ft(**sync):
    return tm.FaultTolerance("http://127.0.0.1:1", replica_group=0, num_replica_groups=2, host="127.0.0.1", **sync)


def _env() -> dict:
    import os

    paths = [str(HERE.parent.parent / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "RUST_LOG": "warn"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The two groups' final weights of each training semi_sync_run.py runs."""
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): replica groups run on it")
    from torchft.coordination import LighthouseServer

    out = tmp_path_factory.mktemp("semi_sync")
    lighthouses = [
        LighthouseServer(bind="127.0.0.1:0", min_replicas=2, join_timeout_ms=1000, heartbeat_timeout_ms=2000)
        for _ in range(7)
    ]
    addresses = ",".join(lighthouse.address() for lighthouse in lighthouses)
    try:
        with ThreadPoolExecutor(2) as pool:
            groups = [pool.submit(_launch, SCRIPT, [str(out), addresses, str(group)], _env()) for group in (0, 1)]
            done = [group.result() for group in groups]
    finally:
        for lighthouse in lighthouses:
            lighthouse.shutdown()
    logs = "\n".join(f"--- group {g}\n{(d.stdout + d.stderr)[-3000:]}" for g, d in enumerate(done))
    assert [d.returncode for d in done] == [0, 0], logs
    return {p.stem: torch.load(p) for p in out.glob("*.pt")}


@pytest.mark.slow
def test_diloco_equals_a_hand_written_loop_around_torchfts_diloco(trained):
    """Two groups, Adam inside, 4 DiLoCo syncs (12 steps, sync_every=3, the paper's Nesterov outer
    optimizer): the Trainer's weights equal the reference loop's (measured: 0.0 apart), though the
    Trainer's group 1 was built from another seed (it starts from group 0's weights)."""
    initial = run.layers(3).state_dict()
    for group in (0, 1):
        mine, reference = trained[f"trainer_diloco_{group}"], trained[f"reference_diloco_{group}"]
        for name, value in reference.items():
            torch.testing.assert_close(mine[name], value, rtol=0, atol=1e-6)
        assert not torch.allclose(mine["0.weight"], initial["0.weight"])  # it trained


@pytest.mark.slow
def test_local_sgd_every_step_with_sgd_equals_one_process_at_the_global_batch(trained):
    """H=1 LocalSGD with plain SGD averages w - lr g over the groups after every step, which is
    w - lr mean(g): one process on both groups' batches (measured: 1.2e-7 apart after 6 steps)."""
    model = run.layers(3)
    optimizer = torch.optim.SGD(model.parameters(), lr=run.SGD_LR)
    # Step k of both groups together: their k-th batches of 8 as the Trainer's shuffling sampler
    # deals them (seed 0), one batch of 16.
    data = run.dataset()
    order = GlobalBatches(len(data), world=2, batch_size=8)
    batches = iter(DataLoader(data, batch_size=16, sampler=order))
    for _ in range(run.LOCAL_SGD_STEPS):
        x, y = next(batches)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    for group in (0, 1):
        mine = trained[f"trainer_local_sgd_{group}"]
        for name, value in model.state_dict().items():
            torch.testing.assert_close(mine[name], value, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_diloco_resumed_mid_interval_from_each_groups_checkpoint_ends_as_the_uninterrupted_run(trained):
    """Each group saved after step 7 (two syncs done, one local step into the third interval; its
    weights differ from the other group's there) and a second run, from modules of another seed,
    resumed from those checkpoints to step 12: the weights equal the uninterrupted run's (measured:
    0.0 apart). Without the state between syncs (the local step count, DiLoCo's weights of the last
    sync and the outer optimizer's momentum) the third sync would come at another step or start
    from other weights."""
    for group in (0, 1):
        resumed, uninterrupted = trained[f"trainer_resumed_diloco_{group}"], trained[f"trainer_diloco_{group}"]
        for name, value in uninterrupted.items():
            torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6)
    assert not torch.equal(trained["trainer_resumed_diloco_0"]["0.weight"], run.layers(100).state_dict()["0.weight"])


@pytest.mark.slow
def test_streaming_diloco_equals_a_hand_written_loop_over_the_same_fragments(trained):
    """fragments=2, sync_every=4 (one of the two Linear layers synced every 2 steps, in turn), 12
    steps: the Trainer's weights equal torchft's DiLoCo over [Linear 8-16, Linear 16-1] with an outer
    optimizer each (measured: 0.0 apart), and differ from the whole-model DiLoCo run's."""
    for group in (0, 1):
        mine, reference = trained[f"trainer_streaming_{group}"], trained[f"reference_streaming_{group}"]
        for name, value in reference.items():
            torch.testing.assert_close(mine[name], value, rtol=0, atol=1e-6)
        assert not torch.allclose(mine["0.weight"], trained[f"trainer_diloco_{group}"]["0.weight"])


@pytest.mark.slow
def test_streaming_diloco_resumed_mid_interval_ends_as_the_uninterrupted_run(trained):
    """fragments=2, sync_every=4: each group saved after step 7 (one local step after fragment 1's
    sync at step 6; fragment 0 synced at step 4) and a second run, from modules of another seed,
    resumed from those checkpoints to step 12: the weights equal the uninterrupted run's. Each
    fragment's weights of its last sync and outer optimizer state, the local step count and torchft's
    step count (which picks the fragment due) come back from the checkpoint."""
    for group in (0, 1):
        resumed, uninterrupted = trained[f"trainer_resumed_streaming_{group}"], trained[f"trainer_streaming_{group}"]
        for name, value in uninterrupted.items():
            torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6)
    assert not torch.equal(trained["trainer_resumed_streaming_0"]["0.weight"], run.layers(100).state_dict()["0.weight"])


def test_streaming_fragments_are_the_models_layers_cut_by_parameter_count():
    from trainmesh.strategies.semi_sync import model_fragments

    five = torch.nn.Sequential(*[torch.nn.Linear(10, 10) for _ in range(5)])
    assert [len(f) for f in model_fragments(five, 2)] == [3, 2]
    assert [len(f) for f in model_fragments(five, 5)] == [1, 1, 1, 1, 1]
    wrapped = model_fragments(run.Net(seed=3, optimizer="adam"), 2)  # a module holding one Sequential
    assert [[type(layer) for layer in f] for f in wrapped] == [[torch.nn.Linear], [torch.nn.Linear]]
    with pytest.raises(ValueError, match="fragments=6: Sequential has 5 top-level layers"):
        model_fragments(five, 6)
    with pytest.raises(ValueError, match="fragments=2: .* or use fragments=1"):
        model_fragments(torch.nn.Linear(2, 2), 2)


def test_sync_settings_that_do_not_fit_together_are_refused():
    with pytest.raises(ValueError, match="sync='bulk'; choose 'every_step', 'local_sgd' or 'diloco'"):
        _ft(sync="bulk")
    with pytest.raises(ValueError, match="sync='diloco' needs sync_every"):
        _ft(sync="diloco")
    with pytest.raises(ValueError, match="sync='local_sgd' averages the weights and has no outer optimizer"):
        _ft(sync="local_sgd", sync_every=2, outer_optimizer=torch.optim.SGD)
    with pytest.raises(ValueError, match="sync_every and outer_optimizer belong to sync='local_sgd' / 'diloco'"):
        _ft(sync_every=4)
    with pytest.raises(ValueError, match="fragments=2 is Streaming DiLoCo: it needs sync='diloco' and a sync_every"):
        _ft(sync="diloco", sync_every=3, fragments=2)
    with pytest.raises(ValueError, match="fragments=2 is Streaming DiLoCo"):
        _ft(sync="local_sgd", sync_every=4, fragments=2)


def test_fsdp_groups_under_diloco_are_refused_before_training():
    with pytest.raises(ValueError, match="sync='diloco' is checked with strategy='ddp'.*sync='every_step' with fsdp"):
        quiet_trainer(strategy="fsdp", devices=2, fault_tolerance=_ft(sync="diloco", sync_every=4), max_steps=8)


def test_resuming_a_diloco_run_from_a_checkpoint_of_another_run_is_refused_before_the_first_step(tmp_path):
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): the refusal comes after its Manager starts")
    from torchft.coordination import LighthouseServer

    plain = quiet_trainer(max_steps=2, default_root_dir=str(tmp_path))
    plain.fit(TutorialModule(num_features=16), loaders()[0])
    checkpoint = tmp_path / "plain.ckpt"
    plain.save_checkpoint(str(checkpoint))
    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    try:
        ft = tm.FaultTolerance(
            lighthouse.address(), replica_group=0, num_replica_groups=1, host="127.0.0.1", sync="diloco", sync_every=2
        )
        model = TutorialModule(num_features=16)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = quiet_trainer(strategy="ddp", fault_tolerance=ft, max_steps=4, default_root_dir=str(tmp_path))
        with pytest.raises(
            ValueError, match="sync='diloco': .*plain.ckpt was not written by a sync='diloco' run.*outer"
        ):
            trainer.fit(model, loaders()[0], ckpt_path=str(checkpoint))
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        # A checkpoint of a semi-synchronous run with other settings: its position inside the interval
        # belongs to those (the entry is as SemiSyncDDPStrategy writes it; refused before any quorum).
        saved = torch.load(checkpoint, weights_only=False)
        saved["optimizer_states"][0]["trainmesh_semi_sync"] = {"sync": "local_sgd", "sync_every": 2}
        torch.save(saved, tmp_path / "other.ckpt")
        trainer = quiet_trainer(strategy="ddp", fault_tolerance=ft, max_steps=4, default_root_dir=str(tmp_path))
        with pytest.raises(ValueError, match="written with sync='local_sgd', sync_every=2, and this run asks for sync"):
            trainer.fit(model, loaders()[0], ckpt_path=str(tmp_path / "other.ckpt"))
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        # Streaming DiLoCo's state is per fragment: a checkpoint of 2 fragments into a run of 1.
        fragments = {f"StreamingDiLoCoFragment_{i}": {} for i in range(2)}
        saved["optimizer_states"][0]["trainmesh_semi_sync"] = {
            "sync": "diloco",
            "sync_every": 2,
            "fragments": fragments,
        }
        torch.save(saved, tmp_path / "fragments.ckpt")
        trainer = quiet_trainer(strategy="ddp", fault_tolerance=ft, max_steps=4, default_root_dir=str(tmp_path))
        with pytest.raises(ValueError, match="sync_every=2, fragments=2, and this run asks for .*fragments=1"):
            trainer.fit(model, loaders()[0], ckpt_path=str(tmp_path / "fragments.ckpt"))
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    finally:
        lighthouse.shutdown()


def test_a_streaming_diloco_checkpoint_of_the_older_fragment_order_is_refused():
    """Before the rejoin, fragment i was saved under torchft's key of place i; since, under place i+1.
    An older checkpoint would load every fragment's last-sync weights and outer state into another one
    (names like ``0.weight`` repeat in every fragment, so nothing would fail): refused as it is read."""
    from trainmesh.strategies.semi_sync import _check_same_sync

    fragments = {f"StreamingDiLoCoFragment_{i}": {} for i in range(2)}
    older = {"sync": "diloco", "sync_every": 4, "fragments": fragments}
    ft = _ft(sync="diloco", sync_every=4, fragments=2)
    with pytest.raises(ValueError, match="old.ckpt is a Streaming DiLoCo checkpoint written before"):
        _check_same_sync(ft, older, "old.ckpt")
    _check_same_sync(ft, {**older, "fragment_order": "turned-by-one"}, "new.ckpt")  # today's: taken
    whole = {**older, "fragments": {"StreamingDiLoCoFragment_0": {}}}
    _check_same_sync(_ft(sync="diloco", sync_every=4), whole, "whole.ckpt")  # one fragment: no order to keep


def test_a_torchft_without_what_a_rejoin_uses_is_refused_before_training():
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft)")
    from trainmesh.strategies.semi_sync import check_torchft_internals

    class LocalSGDWithoutItsSync:  # as a torchft that renamed LocalSGD's private sync would be
        _local_step = 0
        _manager = None

    with pytest.raises(RuntimeError, match=r"sync='LocalSGD' relies on torchft 0.2's LocalSGD \(_perform_sync\)"):
        check_torchft_internals(LocalSGDWithoutItsSync())


KILLS = HERE / "semi_sync_kills_run.py"


@pytest.fixture(scope="module")
def kill_runs(tmp_path_factory):
    """semi_sync_kills_run.py under DiLoCo, LocalSGD and Streaming DiLoCo, the launches at once (their
    groups mostly wait: for a quorum, a dead peer's heartbeat, a restart), each program a fork of the
    fork server that imported torch and trainmesh once (helpers/forked.py): what each group logged
    and ended with, by sync mode."""
    if not HAS_TORCHFT:
        pytest.skip("torchft is not installed (pip install torchft): replica groups run on it")
    from torchft.coordination import LighthouseServer

    env = {**_env(), "OMP_NUM_THREADS": "1"}
    # A killed group is dropped once its heartbeat is 500 ms old (a wait each kill costs the survivor;
    # a live Manager heartbeats every 100 ms from a thread of its own: test_fault_tolerance.py's
    # HEARTBEAT_TIMEOUT_MS says what that leaves on a loaded machine).
    lighthouses, launches = [], {}
    try:
        with ThreadPoolExecutor(6) as pool:
            for sync in ("diloco", "local_sgd", "streaming"):
                out = tmp_path_factory.mktemp(f"semi_sync_kills_{sync}")
                lighthouses.append(
                    LighthouseServer(bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=5000, heartbeat_timeout_ms=500)
                )
                args = [str(out), lighthouses[-1].address(), sync]
                launches[sync] = (
                    out,
                    [pool.submit(_launch, KILLS, [role, *args], env) for role in ("survivor", "doomed")],
                )
            results = {}
            for sync, (out, groups) in launches.items():
                done = [group.result() for group in groups]
                for role, finished in zip(("survivor", "doomed"), done):
                    (out / f"log_{role}").write_text(f"{finished.stdout}{finished.stderr}")
                logs = "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(out.glob("log_*")))
                results[sync] = (out, tuple(finished.returncode for finished in done), logs)
    finally:
        for lighthouse in lighthouses:
            lighthouse.shutdown()
    return results


def _launch(program: Path, args: list[str], env: dict) -> subprocess.CompletedProcess:
    """``python PROGRAM ARGS``, forked where the platform has the fork server (no interpreter to start
    and no torch to import: helpers/forked.py)."""
    if can_fork():
        return run_forked(program, args, env=env, timeout=500)
    return subprocess.run([sys.executable, str(program), *args], env=env, capture_output=True, text=True, timeout=500)


@pytest.fixture(scope="module")
def killed_in_a_sync(kill_runs):
    """Two DiLoCo groups: group 1 SIGKILLed inside its second sync's all-reduce, started again (a
    fork) once group 0 has synced alone, SIGKILLed again between two syncs and started again."""
    return kill_runs["diloco"]


@pytest.fixture(scope="module")
def local_sgd_killed_between_syncs(kill_runs):
    """Two LocalSGD groups: group 1 SIGKILLed between two syncs and started again."""
    return kill_runs["local_sgd"]


@pytest.fixture(scope="module")
def streaming_killed_between_syncs(kill_runs):
    """Two Streaming DiLoCo groups (2 fragments, one synced every 3 steps in turn): group 1 SIGKILLed
    between two syncs and started again."""
    return kill_runs["streaming"]


def _syncs(path: Path) -> list[tuple[int, ...]]:
    """(global step, participants, torchft's step count, errored, pid) of each sync step a group logged."""
    return [tuple(int(v) for v in line.split()) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_group_killed_inside_a_diloco_sync_leaves_the_survivor_training(killed_in_a_sync):
    """torchft's rules: the sync the dead group was in fails on the survivor (its all-reduce errors;
    DiLoCo puts back the weights of the last sync and torchft's step count stays), then the survivor
    syncs alone and trains on to the end, in the same process."""
    from semi_sync_kills_run import EVERY

    out, codes, logs = killed_in_a_sync
    assert codes == (0, 0), logs
    assert int((out / "dead_0").read_text()) == -9 and (out / "killing_0").read_text() == str(2 * EVERY - 1), logs
    survivor = _syncs(out / "syncs_0")
    end = int((out / "end").read_text())
    assert [s[0] for s in survivor] == list(range(EVERY, end + 1, EVERY)), logs
    assert len({s[4] for s in survivor}) == 1
    first, second, third = survivor[:3]
    assert first[1] == 2 and first[3] == 0, survivor  # the first sync: both groups
    assert second[1] == 2 and second[3] == 1 and second[2] == first[2], survivor  # failed: no step counted
    assert third[1] == 1 and third[3] == 0 and third[2] == first[2] + 1, survivor  # alone, committed
    final = torch.load(out / "final_0.pt", weights_only=True)
    assert final["global_step"] == end and final["committed"] == survivor[-1][2]
    print(f"survivor's syncs (step, participants, torchft step, errored): {[s[:4] for s in survivor]}")


@pytest.mark.slow
def test_a_group_started_again_rejoins_at_the_next_sync_and_both_end_with_equal_weights(killed_in_a_sync):
    """Each restarted DiLoCo group (after a kill inside a sync, and after one between syncs) meets the
    survivor at its next sync: torchft heals it from the survivor (weights, Adam, DiLoCo's state,
    step counts) and it takes part in that sync, which commits on both (no sync lost to the rejoin:
    before, the restarted group was refused and that sync failed on the survivor). A kill between
    syncs fails no sync. Both end at the same step with the same weights and torchft step count."""
    _check_rejoins(*killed_in_a_sync, killed_between=1, attempts=3)


@pytest.mark.slow
def test_a_local_sgd_group_killed_between_syncs_rejoins_and_both_end_with_equal_weights(
    local_sgd_killed_between_syncs,
):
    """The same under LocalSGD (the weights averaged at the sync the restarted group joins)."""
    _check_rejoins(*local_sgd_killed_between_syncs, killed_between=0, attempts=2)


@pytest.mark.slow
def test_a_streaming_diloco_group_killed_between_syncs_rejoins_and_both_end_with_equal_weights(
    streaming_killed_between_syncs,
):
    """The same under Streaming DiLoCo: the restarted group takes every fragment's state and syncs
    the fragment due (torchft's step count picks it) with the survivor. Right after that sync the
    groups hold the same weights; at the end only the fragment synced last is the same on both (the
    other trained locally since its own sync)."""
    _check_rejoins(*streaming_killed_between_syncs, killed_between=0, attempts=2, synced_at_end=("net.0.", "net.2."))


def _check_rejoins(
    out: Path, codes: tuple, logs: str, *, killed_between: int, attempts: int, synced_at_end: tuple = ("",)
) -> None:
    """``synced_at_end``: the fragments' parameter-name prefixes, one of which the last sync synced."""
    from semi_sync_kills_run import EVERY

    assert codes == (0, 0), logs
    killing = int((out / f"killing_{killed_between}").read_text())
    assert int((out / f"dead_{killed_between}").read_text()) == -9 and killing % EVERY == 1, logs
    survivor = {s[0]: s for s in _syncs(out / "syncs_0")}
    rejoined = _syncs(out / "syncs_1")
    pids = list(dict.fromkeys(s[4] for s in rejoined))  # group 1's processes, in order
    assert len(pids) == attempts, rejoined
    for pid in pids[1:]:
        first = next(s for s in rejoined if s[4] == pid)
        # (global step, participants, torchft step, errored): the survivor's sync at that step, both in it
        assert first[:4] == survivor[first[0]][:4] and first[1] == 2 and first[3] == 0, (first, survivor)
    after_kill = min(step for step in survivor if step > killing)
    assert survivor[after_kill][1] == 1 and survivor[after_kill][3] == 0, survivor  # alone, committed
    at_rejoin = [torch.load(out / f"rejoined_{group}.pt", weights_only=True) for group in (0, 1)]
    torch.testing.assert_close(at_rejoin[0], at_rejoin[1], rtol=0, atol=0)  # the whole model, after the rejoin sync
    ends = [torch.load(out / f"final_{group}.pt", weights_only=True) for group in (0, 1)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == int((out / "end").read_text())
    assert ends[0]["committed"] == ends[1]["committed"]
    weights = [end["weights"] for end in ends]
    same = [all(torch.equal(v, weights[1][n]) for n, v in weights[0].items() if n.startswith(p)) for p in synced_at_end]
    assert sum(same) == 1, (same, weights)  # the fragment synced last (the whole model: "")
    print(f"group 1's syncs (step, participants, torchft step, errored): {[s[:4] for s in rejoined]}")
