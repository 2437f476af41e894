"""Torch's unused-parameter error re-raised in Lightning 2.6's words (one process, beside Lightning)."""

import pytest

from trainmesh.strategies.unused_parameters import unused_parameters_in_lightning_words

TORCH_WORDS = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This error indicates"
    " that your module has parameters that were not used in producing loss.\nParameter indices which did not"
    " receive grad for rank 0: 4 5 6 7"
)


def test_the_reducer_error_reads_as_lightning_s_and_stays_the_same_exception():
    from lightning.pytorch.strategies import DDPStrategy as LightningDDP

    expected = RuntimeError(TORCH_WORDS, 7)
    LightningDDP().on_exception(expected)
    raised = RuntimeError(TORCH_WORDS, 7)
    with pytest.raises(RuntimeError) as caught, unused_parameters_in_lightning_words():
        raise raised
    assert caught.value is raised
    assert caught.value.args == expected.args


def test_other_errors_pass_unchanged():
    with pytest.raises(RuntimeError) as caught, unused_parameters_in_lightning_words():
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    assert caught.value.args == ("mat1 and mat2 shapes cannot be multiplied",)
