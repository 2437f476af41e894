"""A model built on the meta device (configure_model under fsdp) starts as an eager build would."""

import pytest
import torch
from torch import nn

from helpers.batches import Batches
from legs import HERE


def transformer() -> nn.Module:
    # Layers built one by one (torchtitan's pattern), not nn.TransformerEncoder, which deep-copies
    # one layer so that every layer starts alike: no replay of initialisers can know that.
    return nn.Sequential(*[nn.TransformerEncoderLayer(16, 2, 32, batch_first=True) for _ in range(2)],
                         nn.LayerNorm(16), nn.Linear(16, 4))


def test_meta_built_transformer_layers_start_with_the_eager_weights():
    torch.manual_seed(0)
    eager = transformer()
    torch.manual_seed(0)
    with torch.device("meta"):
        meta_built = transformer()
    from trainmesh.strategies.materialize import materialize

    materialize(meta_built, torch.device("cpu"))
    for (name, expected), (_, got) in zip(eager.state_dict().items(), meta_built.state_dict().items()):
        assert torch.equal(expected, got), name  # MultiheadAttention's in_proj_* included


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(4))  # initialised in __init__ only: lost on meta
        self.register_buffer("table", torch.arange(4.0))


def test_tensors_no_initialiser_covers_are_named():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), Scale())
    from trainmesh.strategies.materialize import materialize

    with pytest.raises(ValueError, match=r"configure_model built 1\.gain, 1\.table on the meta device.*reset_parameters"):
        materialize(model, torch.device("cpu"))


def test_fsdp_meta_built_transformer_starts_and_ends_as_ddp(tmp_path):
    # Both legs in one launch, one after another in the same processes (helpers/batches.py).
    legs = Batches(HERE / "meta_run.py", tmp_path, [(strategy, 2, [strategy, str(tmp_path / f"{strategy}.pt")], {})
                                                    for strategy in ("ddp", "fsdp")], leg_timeout=180, cwd=HERE)
    saved = {}
    for strategy in ("ddp", "fsdp"):
        legs(strategy)
        saved[strategy] = torch.load(tmp_path / f"{strategy}.pt")
    assert saved["fsdp"]["built_on"] == "meta" and saved["ddp"]["built_on"] == "cpu"
    for name, value in saved["ddp"]["initial"].items():
        assert torch.equal(value, saved["fsdp"]["initial"][name]), name
    assert all(torch.isfinite(t).all() for t in saved["fsdp"]["final"].values())
    worst = max((saved["fsdp"]["final"][k] - v).abs().max().item() for k, v in saved["ddp"]["final"].items())
    assert worst <= 1e-4, worst
