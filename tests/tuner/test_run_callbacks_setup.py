"""A pytorch-lightning 1.x ``trainer.tune`` with ``auto_lr_find`` gives the run's callbacks ``setup`` and
``teardown`` around its search, as 1.9.5's (its search runs in a ``Trainer._run`` of its own; the
callbacks' other hooks are not called, the search's own callback replaced them). trainmesh called
neither. Compared with 1.9.5's recording (``helpers/lightning1_owner_items.py``); with
``auto_scale_batch_size`` too: ``tests/trainer/lightning1/test_tuner.py``."""

from helpers.lightning1_owner_records import RECORDED, under_trainmesh


def test_a_1x_tune_s_lr_search_sets_the_run_s_callbacks_up_and_down_as_1_9_5():
    assert under_trainmesh("tune_setup_calls", auto_lr_find=True) == RECORDED["tune_setup_lr"]
