"""``utilities.signature_utils.is_param_in_hook_signature`` answers as Lightning 2.6's for the same
hooks (lightning-bolts' verification callbacks ask it of ``transfer_batch_to_device``)."""

import functools

import pytest

from trainmesh.utilities.signature_utils import is_param_in_hook_signature

owner = pytest.importorskip("lightning.pytorch.utilities.signature_utils")


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class Hooks:
    def named(self, batch, device, dataloader_idx): ...

    def without(self, batch, device): ...

    def star(self, batch, *args): ...

    @_decorated
    def wrapped(self, batch, dataloader_idx): ...


@pytest.mark.parametrize("hook", ["named", "without", "star", "wrapped"])
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("min_args", [None, 2, 3])
def test_answers_as_lightning(hook, explicit, min_args):
    fn = getattr(Hooks(), hook)
    theirs = owner.is_param_in_hook_signature(fn, "dataloader_idx", explicit=explicit, min_args=min_args)
    assert is_param_in_hook_signature(fn, "dataloader_idx", explicit=explicit, min_args=min_args) == theirs
