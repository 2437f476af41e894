"""An optimizer built before setup is pointed at the parameters a strategy put in place."""

import torch
from legs import HERE, run


def test_fsdp_rebinds_an_optimizer_built_before_setup_keeping_groups_and_state(tmp_path):
    out = tmp_path / "report.pt"
    # Two forks in one process group (the Runtime finds its processes started, as under torchrun):
    # the test is about the optimizer, not how the processes start, and forks import nothing again.
    result = run(str(HERE / "rebind_run.py"), str(out), timeout=150, forked=True, world=2)
    assert result.returncode == 0, result.stderr[-3000:]
    report = torch.load(out)
    assert report["all_rebound"] and report["count"] == 4
    assert report["groups"] == [(0.1, (0.9, 0.999)), (0.01, (0.8, 0.9))]
    assert report["moments_match"] and report["steps_kept"]
    assert report["trained"]  # the step changed the weights the model uses
