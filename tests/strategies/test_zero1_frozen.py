"""zero1 leaves parameters that take no gradient out of the sharded optimizer, and says so if
one of them is unfrozen later without being added to the optimizer."""

import textwrap

from legs import run

PROGRAM = textwrap.dedent("""
    import torch, torch.distributed as dist
    from trainmesh.launchers.environments import find_free_port
    from trainmesh.strategies.ddp import shard_optimizer_state
    from trainmesh.strategies.process_group import leave_process_group
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{find_free_port()}", rank=0, world_size=1)
    frozen, trained = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    frozen.requires_grad_(False)
    seed = torch.nn.Parameter(torch.zeros(2, dtype=torch.int32), requires_grad=False)  # as Keras' dropout seed
    model = torch.nn.Sequential(frozen, trained)
    optimizer = shard_optimizer_state(torch.optim.Adam([*model.parameters(), seed], lr=0.1))
    assert sum(len(g["params"]) for g in optimizer.param_groups) == 2  # the trained layer's weight and bias
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    frozen.requires_grad_(True)
    model(torch.ones(2, 4)).sum().backward()
    try:
        optimizer.step()
    except RuntimeError as error:
        print("REFUSED", error)
    # Not a bare destroy_process_group(): zero1's gloo threads can abort the exit (see leave_process_group).
    leave_process_group(failed=False)
""")


def test_zero1_skips_frozen_parameters_and_refuses_them_unfrozen_later(tmp_path):
    # A fork of the fork server (helpers/forked.py: torch imported once): how it starts is not checked.
    script = tmp_path / "zero1_frozen.py"
    script.write_text(PROGRAM)
    result = run(str(script), timeout=60, forked=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REFUSED 2 parameter(s) of shapes [(4, 4), (4,)] did not require grad" in result.stdout
    assert "optimizer.add_param_group" in result.stdout


def test_zero1_refuses_lbfgs_before_it_could_hang():
    import pytest
    import torch

    from trainmesh.strategies.ddp import shard_optimizer_state

    model = torch.nn.Linear(4, 1)
    # No process group is needed: the refusal comes before ZeroRedundancyOptimizer is built.
    with pytest.raises(ValueError, match="zero1' cannot shard LBFGS.*hang.*strategy='ddp'"):
        shard_optimizer_state(torch.optim.LBFGS(model.parameters()))
