"""Trainer(compile=...): the compiled run trains the weights the eager run trains (single, ddp,
fsdp: 20 Adam steps, within 1e-5), its checkpoints hold the module's own keys, and a compiled
run's checkpoint resumes compiled or eager. ``trainer.fit(torch.compile(model))`` (Lightning's way)
trains as ``Trainer(compile=...)`` does under single, ddp and fsdp, and is refused, saying why, where the
strategy does not compile. Legs of compile_run.py, batched per world size (helpers/batches.py);
``backend="aot_eager"`` (fast), one inductor leg marked slow."""

from pathlib import Path

import pytest
import torch
from legs import HERE

import trainmesh as tm
from helpers.batches import Batches

PROGRAM = HERE / "compile_run.py"


def plan(root: Path) -> list:
    def leg(name, world, *args):
        return name, world, [a.replace("OUT", str(root / f"{name}.pt")) for a in args], {}

    checkpoint = str(root / "single-compiled.pt.ckpt")
    return [
        leg("single-eager", 1, "train", "single", "1", "no", "OUT"),
        leg("single-compiled", 1, "train", "single", "1", "aot_eager", "OUT", "20", "10"),
        leg("resume-compiled", 1, "resume", "single", "1", "aot_eager", checkpoint, "OUT"),
        leg("resume-eager", 1, "resume", "single", "1", "no", checkpoint, "OUT"),
        # Two processes of batch 8 each see, step by step, the batch of 16 one process sees.
        leg("single-eager-16", 1, "train", "single", "1", "no", "OUT", "20", "", "16"),
        leg("refuse", 1, "refuse", "OUT"),
        # torch.compile(model) by the user, batch 16 a step (8 a process under ddp): as single-eager-16.
        leg("user-single", 1, "user", "single", "1", "aot_eager", "OUT", "10"),
        leg("user-resume-eager", 1, "resume", "single", "1", "no", str(root / "user-single.pt.ckpt"), "OUT", "16"),
        leg("ddp-compiled", 2, "train", "ddp", "2", "aot_eager", "OUT"),
        leg("fsdp-compiled", 2, "train", "fsdp", "2", "aot_eager", "OUT"),
        leg("user-ddp", 2, "user", "ddp", "2", "aot_eager", "OUT"),
        leg("user-fsdp", 2, "user", "fsdp", "2", "aot_eager", "OUT"),
        None,  # its own launch: only the slow test asks for it
        leg("single-inductor", 1, "train", "single", "1", "inductor", "OUT"),
    ]


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Batches:
    root = tmp_path_factory.mktemp("compile")
    # Not a fork of this worker: Lightning, once another test imported it here, patches torch's
    # Module.compile to record its arguments on the module (lightning_fabric's wrappers), which
    # the check of what compiling writes onto a module must not see. A fork of the fork server
    # (helpers/forked.py) is clean: it imported torch and trainmesh only, never Lightning.
    return Batches(PROGRAM, root, plan(root), leg_timeout=240, cwd=HERE, forked=True, fork_workers=True)


def result(legs: Batches, name: str) -> dict:
    legs(name)
    return torch.load(legs.root / f"{name}.pt")


def assert_same_weights(got: dict, expected: dict, atol: float) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=0, atol=atol, msg=key)


@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp"])
def test_compiled_training_matches_eager_and_keeps_the_modules_keys(legs, strategy):
    # The reference is eager on one process (the same global batches under ddp and fsdp).
    eager = result(legs, "single-eager" if strategy == "single" else "single-eager-16")
    compiled = result(legs, f"{strategy}-compiled")
    assert compiled["graphs"] >= 1 and compiled["compiled"], "the run did not compile anything"
    # fsdp compiles each block before sharding it (torchtitan's order; the small embed and head stay
    # in the root, uncompiled, as torchtitan compiles only the blocks); the others the whole forward.
    assert compiled["compiled"] == (["blocks.0", "blocks.1"] if strategy == "fsdp" else [""])
    assert not any("_orig_mod" in key for key in compiled["state_dict"])
    assert_same_weights(compiled["state_dict"], eager["state_dict"], atol=1e-5)
    # A real change: 20 Adam steps moved the weights well past the tolerance.
    assert not torch.allclose(eager["state_dict"]["head.weight"], initial_head(), atol=1e-3)


def initial_head() -> torch.Tensor:
    from compile_run import Net

    return Net().head.weight.detach()


def test_a_compiled_runs_checkpoint_resumes_compiled_and_eager(legs):
    uninterrupted = result(legs, "single-compiled")
    checkpoint = torch.load(legs.root / "single-compiled.pt.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 10
    assert list(checkpoint["state_dict"]) == list(uninterrupted["state_dict"])  # embed.weight, ...: no _orig_mod
    for name in ("resume-compiled", "resume-eager"):
        resumed = result(legs, name)
        assert_same_weights(resumed["state_dict"], uninterrupted["state_dict"], atol=1e-6)
    assert result(legs, "resume-compiled")["graphs"] >= 1


@pytest.mark.slow
def test_inductor_matches_eager(legs):
    assert_same_weights(
        result(legs, "single-inductor")["state_dict"], result(legs, "single-eager")["state_dict"], atol=1e-5
    )


def test_compile_settings_are_checked():
    from trainmesh.strategies.compile import compile_options

    assert compile_options(True) == {} and compile_options(False) is None
    with pytest.raises(TypeError, match="must be True, False or a dict of torch.compile options"):
        tm.Trainer(accelerator="cpu", devices=1, compile="max-autotune", logger=False)
    with pytest.raises(ValueError, match="strategy='dp'"):
        tm.Trainer(accelerator="cpu", devices=2, strategy="dp", compile=True, logger=False)


@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp"])
def test_fit_of_a_module_the_user_compiled_trains_as_eager_and_the_users_reference_holds_it(legs, strategy):
    # Lightning 2.6.6 accepts trainer.fit(torch.compile(model)) under single, ddp and fsdp: here the
    # module itself is compiled in place where the strategy compiles, with the user's settings.
    run = result(legs, f"user-{strategy}")
    # Where Trainer(compile=...) compiles: the whole forward, or under fsdp each block before sharding it.
    assert run["compiled"] == (["blocks.0", "blocks.1"] if strategy == "fsdp" else [""])
    assert not any("_orig_mod" in key for key in run["state_dict"])
    assert_same_weights(run["state_dict"], result(legs, "single-eager-16")["state_dict"], atol=1e-5)
    if strategy == "single":  # trainer.predict(compiled) and the user's compiled(x) after fit: the trained model
        from compile_run import Net

        eager = Net()
        eager.load_state_dict(run["state_dict"])
        with torch.no_grad():
            expected = eager(run["predict_input"])
        assert not torch.allclose(Net()(run["predict_input"]), expected, atol=1e-3)  # training changed them
        torch.testing.assert_close(run["predicted"], expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(run["user_output"], expected, rtol=0, atol=1e-5)


def test_a_checkpoint_of_a_fit_of_a_user_compiled_module_loads_into_the_uncompiled_module(legs):
    from compile_run import Net

    checkpoint = torch.load(legs.root / "user-single.pt.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 10
    Net().load_state_dict(checkpoint["state_dict"])  # strict: the module's own keys, no '_orig_mod.'
    # Resumed eager from it, the run ends where the uninterrupted compiled one ended.
    resumed = result(legs, "user-resume-eager")
    assert_same_weights(resumed["state_dict"], result(legs, "user-single")["state_dict"], atol=1e-5)


def test_fit_of_a_module_the_user_compiled_is_refused_where_the_strategy_does_not_compile(legs):
    # Run in a leg: importing dynamo for torch.compile costs seconds, already paid there.
    messages = result(legs, "refuse")
    for strategy, reason in (("zero1", "no compiled zero1 run"), ("dp", "DataParallel replicates")):
        message = messages[strategy]
        assert f"torch.compile(Net(...)), and strategy='{strategy}' does not compile yet ({reason}" in message
        assert "pass Net(...) itself, uncompiled" in message and "strategy='single', 'ddp' or 'fsdp'" in message
    assert "compile once" in messages["twice"]  # torch.compile(model) and Trainer(compile=True) both
    assert messages["runtime_setup"] is True  # a loop of one's own: Runtime.setup(torch.compile(m)) compiles m
    # torch's Module.compile state only: the user's settings are recorded by the strategy, not on m
    assert messages["written_onto_layer"] == ["_compiled_call_impl", "_is_torch_compile"]


@pytest.mark.parametrize("strategy", ["ddp2", "zero1", "sharded", "hsdp"])
def test_compile_is_refused_where_no_compiled_run_is_checked_against_eager(strategy):
    # Only single, ddp and fsdp have a parity test above: the others stop before any process starts.
    with pytest.raises(ValueError, match=f"compile is not supported with strategy='{strategy}'"):
        tm.Trainer(accelerator="cpu", devices=2, strategy=strategy, compile=True, logger=False)
    tm.Trainer(accelerator="cpu", devices=2, strategy=strategy, compile=False, logger=False)  # eager: as before
