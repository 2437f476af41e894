"""A model built on meta, split by tensor parallelism and initialised by its own init_weights()
never holds its whole self at once (the stand-ins of its shards are lazy, stand_ins.py), and
starts exactly where the eager build starts: one 2-rank run (stand_ins_run.py) of tests/helpers'
Llama and of a model whose hook goes back to tensors it drew earlier."""

from __future__ import annotations

import pytest
import torch
from legs import FORK_WORKERS, run


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("stand_ins") / "out.pt"
    result = run("stand_ins_run.py", str(out), timeout=180, forked=True, env=FORK_WORKERS)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out)


def test_init_weights_under_tp_holds_one_whole_tensor_at_a_time_never_the_model(saved):
    peak = saved["llama"][2]
    # Each op of its init_weights uses one tensor: measured, the unsharded norms + the largest
    # stand-in (33920 of 214144 bytes). Stand-ins made all at once (before stand_ins.py) held
    # the whole model: 214144.
    assert peak <= saved["llama_unsharded_bytes"] + saved["llama_largest_bytes"]
    assert peak < saved["llama_whole_bytes"] / 2


@pytest.mark.parametrize("model", ["llama", "revisiting"])
def test_lazy_stand_ins_give_the_eager_build_bit_for_bit(saved, model):
    # "revisiting" draws three tensors where two fit, then part-writes and reads the first ones
    # again (gathered back from the shards), reads one through tolist() and draws by rejection.
    eager, built, _ = saved[model]
    assert eager.keys() == built.keys()
    for name, value in eager.items():
        assert torch.equal(value, built[name]), name
