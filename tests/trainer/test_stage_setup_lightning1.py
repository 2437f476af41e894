"""A pytorch-lightning 1.x module's ``trainer.validate(model, loader)`` points the fit's validation at the
loader given, as 1.9.5's attach_dataloaders does: ``trainer.enable_validation`` is True during and after
it with no ``val_dataloader`` of the module's (trainmesh said False: owner-small7). Compared with 1.9.5's
recording (``helpers/lightning1_owner_items.py``); a 2.x module keeps 2.6's rule (its validate has a loop
of its own)."""

from helpers.lightning1_owner_records import RECORDED, under_trainmesh


def test_a_1x_validate_with_a_loader_enables_validation_as_1_9_5():
    assert under_trainmesh("validate_enables_validation") == RECORDED["validate_enables_validation"]
