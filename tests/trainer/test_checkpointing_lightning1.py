"""validate/test/predict(ckpt_path=...) give the callbacks their saved states as Lightning 2.6 does, except
for a module written for pytorch-lightning 1.x, where 1.9.5 restored them in fit only
(``trainer/checkpointing.py``'s ``restore_modules``). Compared with 1.9.5 itself: the program in
``helpers/lightning1_ported_programs.py`` was run under 1.9.5 by ``record_lightning_1_9_ported_programs.py``;
the 2.x module beside Lightning 2.6.6."""

import json
import warnings
from pathlib import Path

import trainmesh as tm
from helpers import lightning1_ported_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_ported_programs.json").read_text()
)


def run_quietly(pl, **kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return programs.checkpoint_states_after_test(pl, **kwargs)


def test_a_1x_module_s_test_from_best_leaves_the_checkpoint_callback_as_fit_left_it():
    """best_k_models keeps the three epochs, last_model_path and current_score the fit's, as 1.9.5.
    Before: the epoch-1 file's states came back (two entries, current_score 1.0), so a 1.x program
    reading the second ModelCheckpoint's best_model_path after test got an older file (l-progs12 p07)."""
    assert run_quietly(tm) == RECORDED["measured"]["checkpoint_states_after_test"]


def test_a_lightning_2_module_s_test_from_best_restores_the_callbacks_as_lightning_2_6():
    import lightning.pytorch as pl

    assert run_quietly(tm, lightning1=False) == run_quietly(pl, lightning1=False)


def test_a_1x_weights_only_checkpoint_has_1_9_5_s_keys():
    """ModelCheckpoint(save_weights_only=True) and save_checkpoint(weights_only=True) of a 1.x module:
    1.9.5's keys (no ``optimizer_states``, which trainmesh wrote as ``[]``), beside trainmesh's own
    documented ones (helpers/lightning1_owner_items.py, recorded under 1.9.5)."""
    from helpers.lightning1_owner_records import RECORDED as OWNER_ITEMS
    from helpers.lightning1_owner_records import under_trainmesh

    own_keys = {"format", "trainmesh_version", "trainmesh_run", "weights_only"}
    found = {
        name: [key for key in keys if key not in own_keys]
        for name, keys in under_trainmesh("weights_only_keys").items()
    }
    assert found == OWNER_ITEMS["weights_only_keys"]
