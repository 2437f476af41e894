"""Lightning 1.x's Trainer arguments that 2.x removed (trainer/lightning1/trainer_arguments.py): each
accepted at 1.x's default, translated with a LightningOneName warning where today's Trainer has the
same thing (num_processes, amp_backend="native", auto_select_gpus), refused with the reason where
trainmesh cannot honour it (TPUs, IPUs, Apex); replace_sampler_ddp=False is use_distributed_sampler=False
(tests/utilities/test_lightning1_deprecations.py); track_grad_norm and the tuner's
auto_lr_find / auto_scale_batch_size run in trainer.tune (test_lightning1_members.py)."""

import pytest
import torch

import trainmesh as tm
from trainmesh.utilities.refusal import LightningOneName

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


@pytest.mark.parametrize(
    "argument, match",
    [
        ({"amp_backend": "apex"}, "Apex is not supported"),
        ({"amp_level": "O2"}, "Apex's optimization levels"),
    ],
)
def test_removed_lightning_one_arguments_trainmesh_cannot_honour_are_refused(argument, match):
    with pytest.raises(ValueError, match=match):
        tm.Trainer(**argument, **QUIET)


def test_removed_lightning_one_arguments_at_their_defaults_or_translated():
    defaults = {"amp_level": None, "auto_lr_find": False, "track_grad_norm": -1, "replace_sampler_ddp": True}
    tm.Trainer(**defaults, **QUIET)
    with pytest.warns(LightningOneName, match="accelerator='cpu', devices=2"):
        trainer = tm.Trainer(num_processes=2, **QUIET)
    assert (trainer.runtime.device_type, trainer.runtime.device_indices) == ("cpu", [0, 1])
    with pytest.warns(LightningOneName, match="amp_backend='native'"):
        tm.Trainer(amp_backend="native", **QUIET)


def test_lightning_one_hardware_arguments():
    with pytest.raises(ValueError, match="TPUs"):
        tm.Trainer(tpu_cores=8, **QUIET)
    with pytest.raises(ValueError, match="IPUs"):
        tm.Trainer(ipus=1, **QUIET)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no visible CUDA devices"):
            tm.Trainer(gpus=2, auto_select_gpus=True, **QUIET)
