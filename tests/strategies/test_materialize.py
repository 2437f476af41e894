"""A model built on the meta device (configure_model under fsdp) starts as an eager build would."""

import pytest
import torch
from legs import HERE
from torch import nn

from helpers.batches import Batches


def transformer() -> nn.Module:
    # Layers built one by one (torchtitan's pattern), not nn.TransformerEncoder, which deep-copies
    # one layer so that every layer starts alike: no replay of initialisers can know that.
    return nn.Sequential(
        *[nn.TransformerEncoderLayer(16, 2, 32, batch_first=True) for _ in range(2)], nn.LayerNorm(16), nn.Linear(16, 4)
    )


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

    with pytest.raises(
        ValueError, match=r"configure_model built 1\.gain, 1\.table on the meta device.*reset_parameters"
    ):
        materialize(model, torch.device("cpu"))


def test_fsdp_meta_built_transformer_starts_and_ends_as_ddp(tmp_path):
    # Both legs in one launch, one after another in the same processes (helpers/batches.py).
    legs = Batches(
        HERE / "meta_run.py",
        tmp_path,
        [(strategy, 2, [strategy, str(tmp_path / f"{strategy}.pt")], {}) for strategy in ("ddp", "fsdp")],
        leg_timeout=180,
        cwd=HERE,
        forked=True,  # a fork of the fork server with its workers forked: no interpreter to start
        fork_workers=True,
    )
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


def test_llama_built_on_meta_and_initialised_by_init_weights_equals_the_eager_build():
    # init_weights() assigns freqs_cis afresh (torchtitan's way) instead of writing into it.
    from helpers.llama import Llama, LlamaConfig
    from trainmesh.strategies.materialize import materialize

    class ResetLlama(Llama):
        reset_parameters = Llama.init_weights  # the hook under torch's name too: run once

    for cls, config in [(Llama, LlamaConfig()), (Llama, LlamaConfig(tie_embeddings=True)), (ResetLlama, LlamaConfig())]:
        torch.manual_seed(0)
        eager = cls(config)
        torch.manual_seed(0)
        with torch.device("meta"):
            meta_built = cls(config)
        materialize(meta_built, torch.device("cpu"))
        for name, expected in eager.state_dict().items():
            assert torch.equal(expected, meta_built.state_dict()[name]), (cls.__name__, config, name)
        if config.tie_embeddings:
            assert meta_built.output.weight is meta_built.tok_embeddings.weight  # still tied


class Replacing(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.empty(3))

    def init_weights(self):
        self.w = nn.Parameter(torch.ones(3))


def test_an_init_weights_that_replaces_a_parameter_is_refused():
    from trainmesh.strategies.materialize import materialize

    with torch.device("meta"):
        model = Replacing()
    with pytest.raises(ValueError, match=r"replaced w \(a parameter\).*fill it in place \(nn.init.normal_"):
        materialize(model, torch.device("cpu"))


def test_a_model_built_on_meta_outside_configure_model_is_refused_naming_configure_model():
    import trainmesh as tm
    from helpers.llama import Llama, LlamaConfig, token_loader

    with torch.device("meta"):
        model = Llama(LlamaConfig())
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(
        ValueError,
        match=r"Llama has tensors on the meta device \(freqs_cis, tok_embeddings.weight, "
        r".*outside configure_model.*Build those layers in the Module's configure_model",
    ):
        trainer.fit(model, token_loader(LlamaConfig()))


def _stage_of(factory, parts):
    """``factory()`` built on meta and cut to ``parts`` as a pipeline stage is, then materialised."""
    from trainmesh.strategies.materialize import materialize
    from trainmesh.strategies.pipeline_cut import keep_only

    torch.manual_seed(0)
    with torch.device("meta"):
        model = factory()
    keep_only(model, parts)
    materialize(model, torch.device("cpu"))
    return model


@pytest.mark.parametrize(
    "factory, stages",
    [
        (transformer, [{"0"}, {"1", "2"}, {"3"}]),  # layers' own initialisers
        (lambda: __import__("helpers.llama").llama.Llama(), [{"tok_embeddings", "layers.0"}, {"layers.2", "output"}]),
    ],
    ids=["reset_parameters", "init_weights"],
)
def test_a_pipeline_stage_built_on_meta_starts_with_the_eager_builds_weights(factory, stages):
    # The other stages' parts are drawn into on throwaway tensors, in the eager build's order.
    torch.manual_seed(0)
    eager = factory().state_dict()
    for parts in stages:
        stage = _stage_of(factory, parts).state_dict()
        assert stage.keys() < eager.keys()
        for name, value in stage.items():
            assert torch.equal(value, eager[name]), (parts, name)
        assert not any(value.is_meta for value in stage.values())


class Rereading(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def init_weights(self):  # skips what another stage holds (None), torchtitan's way
        for linear in (self.a, self.b, self.c):
            if linear is not None:
                nn.init.normal_(linear.weight)
        if self.a is not None and self.c is not None:
            self.c.weight.add_(self.a.weight)  # a, another stage's, was evicted: its value is gone


def test_a_hook_that_rereads_another_stages_tensor_draws_for_its_own_stage_only_with_a_warning():
    with pytest.warns(UserWarning, match=r"could not be replayed over the other pipeline stages' layers"):
        stage = _stage_of(Rereading, {"c"})
    torch.manual_seed(0)
    alone = Rereading()  # what the stage draws alone: c's initialisers, then the hook on c and a
    torch.manual_seed(0)
    with torch.device("meta"):
        expected = Rereading()
    from trainmesh.strategies.materialize import materialize

    expected.a = expected.b = None
    materialize(expected, torch.device("cpu"))
    assert torch.equal(stage.c.weight, expected.c.weight)
    assert not torch.equal(stage.c.weight, alone.c.weight)
