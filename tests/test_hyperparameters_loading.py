"""``load_from_checkpoint``'s loading of the weights, under Lightning 2.6 and trainmesh (Lightning's
tests_pytorch/core/test_saving.py): ``on_load_checkpoint`` runs on the built module before the
weights load (here it renames a saved key), ``strict=None`` follows the module's ``strict_loading``
(set and given apart: ``ValueError``), a non-strict load warns of missing and unexpected keys, and an
empty state dict warns."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def loading_program(L, root):
    class Saved(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.old_name = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.old_name(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Renamed(L.pl.LightningModule):
        def __init__(self, lenient: bool | None = None, unset: bool = False) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.extra = torch.nn.Linear(1, 1)
            if lenient is not None:
                self.strict_loading = not lenient
            if unset:  # Lightning's setter takes None: unset, so no conflict with a strict given
                self.strict_loading = None

        def on_load_checkpoint(self, checkpoint):
            state = checkpoint["state_dict"]
            for key in list(state):
                state[key.replace("old_name", "layer")] = state.pop(key)

    trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=2, logger=False, enable_checkpointing=False))
    saved = Saved()
    trainer.fit(saved, DataLoader(TensorDataset(torch.ones(4, 4))))
    path = root / "saved.ckpt"
    trainer.save_checkpoint(path)
    found = {}

    def attempt(name, cls, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                module = cls.load_from_checkpoint(path, **kwargs)
                found[name] = {"weight": module.layer.weight.detach().clone()} if hasattr(module, "layer") else {}
            except Exception as error:  # noqa: BLE001 - the type is the outcome
                found[name] = {"raised": type(error).__name__}
        found[name]["warned"] = sorted(
            str(w.message)[:40] for w in caught if "keys" in str(w.message) or "contains no" in str(w.message)
        )

    attempt("strict_default", Renamed)  # extra.* missing: strict by default
    attempt("lenient_module", Renamed, lenient=True)  # strict_loading=False: loads, warns of extra.*
    attempt("conflict", Renamed, lenient=True, strict=True)
    attempt("given_false", Renamed, strict=False)
    attempt("set_to_none", Renamed, unset=True, strict=False)
    found["trained"] = saved.old_name.weight.detach().clone()
    empty = torch.load(path, weights_only=False)
    empty["state_dict"] = {}
    torch.save(empty, root / "empty.ckpt")
    path = root / "empty.ckpt"
    attempt("empty", Saved, strict=False)
    return found


def test_load_from_checkpoint_loads_weights_as_lightning(tmp_path):
    """Before: trainmesh ran no on_load_checkpoint (the renamed key was missing: strict error even
    with strict_loading=False, which load_from_checkpoint ignored), and gave none of the warnings."""
    found = run_both(loading_program, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert torch.equal(theirs["lenient_module"]["weight"], theirs["trained"])
    assert theirs["conflict"]["raised"] == "ValueError"
    assert differences(theirs, ours) == []
