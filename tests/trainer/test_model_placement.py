"""Lightning's former names around building and placing the model: configure_sharded_model (1.x and
2.0's configure_model) is called where configure_model is, in the strategy's init context, at every
stage as Lightning calls both (placement once per model object), with one warning line at the user's
definition naming what replaces it;
on_post_move_to_device (1.x, which no release measured against calls) is not called, said once."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer


def data():
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


class Legacy(tm.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def setup(self, stage):
        self.calls.append(("setup", stage))

    def configure_sharded_model(self):
        self.calls.append(("configure_sharded_model", torch.empty(1).device.type))
        self.layer = torch.nn.Linear(4, 1)
        self.head = torch.nn.Linear(1, 1)

    def on_post_move_to_device(self):
        self.calls.append(("on_post_move_to_device", str(self.layer.weight.device)))
        self.head.weight = torch.nn.Parameter(self.layer.weight[:, :1].detach().clone())  # what 1.x code did here

    def configure_optimizers(self):
        self.calls.append(("configure_optimizers",))
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def training_step(self, batch, batch_idx):
        return F.mse_loss(self.head(self.layer(batch[0])), batch[1])

    def test_step(self, batch, batch_idx):
        self.log("test_loss", F.mse_loss(self.head(self.layer(batch[0])), batch[1]))


def test_configure_sharded_model_runs_where_lightning_runs_it_and_on_post_move_to_device_does_not():
    """configure_sharded_model, Lightning's former name of configure_model, runs (Lightning 2.6 still calls
    it, with a line naming the replacement); on_post_move_to_device, which pytorch-lightning 1.7 removed,
    runs under no release measured against (1.9.5, 2.6): not called, said once."""
    module = Legacy()
    trainer = quiet_trainer(max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data())
    lines = [(str(w.message), w.category, w.filename) for w in caught if w.category is FutureWarning]
    assert lines == [
        (
            "Legacy.configure_sharded_model is Lightning's former name of configure_model; rename it",
            FutureWarning,
            __file__,
        )
    ]
    not_called = [str(w.message) for w in caught if "is not called" in str(w.message)]
    assert len(not_called) == 1 and not_called[0].startswith("Legacy.on_post_move_to_device is not called")
    assert module.calls == [("setup", "fit"), ("configure_sharded_model", "cpu"), ("configure_optimizers",)]
    trainer.test(module, data(), verbose=False)  # at every stage, as Lightning's _call_configure_model
    assert module.calls[3:] == [("setup", "test"), ("configure_sharded_model", "cpu")]


def _distilling(base):
    class Distilling(base):
        """l-progs14 p07's pattern: configure_model builds the student once and copies it into a teacher."""

        def __init__(self):
            super().__init__()
            self.model, self.teacher, self.calls = None, None, []

        def configure_model(self):
            self.calls.append(self.trainer.state.fn.value)
            if self.model is None:
                self.model = torch.nn.Linear(4, 1)
            self.teacher = copy.deepcopy(self.model)
            self.teacher.eval()

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.model(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.model(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self.teacher(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.model.parameters(), lr=0.1)

    return Distilling


def test_configure_model_runs_at_every_stage_of_a_trainer_as_lightning_runs_it():
    """Lightning calls configure_model at fit, validate and predict of the same Trainer (its docs: make it
    idempotent); a hook that copies the trained student into a teacher sees each call. Before: trainmesh
    called it once per model object, so after validate the teacher kept the untrained copy (p07: final
    weights 0.19 away from Lightning's)."""
    L = pytest.importorskip("lightning.pytorch")
    seen = []
    for framework, base in ((tm, tm.Module), (L, L.LightningModule)):
        torch.manual_seed(0)
        module = _distilling(base)()
        trainer = quiet_trainer(framework=framework, max_epochs=1)
        trainer.fit(module, data(), data())
        trainer.validate(module, data(), verbose=False)
        predicted = trainer.predict(module, data())
        seen.append((module.calls, module.teacher.training, torch.cat(predicted), module.state_dict()))
    (ours, ours_eval, ours_out, ours_sd), (theirs, theirs_eval, theirs_out, theirs_sd) = seen
    assert ours == theirs == ["fit", "validate", "predict"] and ours_eval == theirs_eval
    assert torch.equal(ours_out, theirs_out) and all(torch.equal(ours_sd[k], theirs_sd[k]) for k in theirs_sd)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_configure_sharded_model_builds_on_the_meta_device_under_fsdp_like_configure_model():
    """The strategy's init context: fsdp builds the layers on the meta device and materializes
    each process's shard (one process here)."""
    module = Legacy()
    quiet_trainer(max_epochs=1, strategy="fsdp").fit(module, data())
    assert ("configure_sharded_model", "meta") in module.calls


def test_both_names_defined_stop_before_anything_is_built():
    class Both(Legacy):
        def configure_model(self):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="Both defines both configure_model and configure_sharded_model"):
        quiet_trainer(max_epochs=1).fit(Both(), data())
