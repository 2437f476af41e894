"""pytorch-lightning 1.9's ``ProgressBarBase`` has the counters a custom bar draws from
(``train_batch_idx``, ``val_batch_idx``, ``test_batch_idx``, ``predict_batch_idx``,
``total_batches_current_epoch``), which 2.0's ``ProgressBar`` dropped; a 1.x bar reading them failed
with AttributeError. Compared with 1.9.5's run of ``helpers/lightning1_owner_items.py`` (a sanity check,
two epochs validating twice each, validate, test, predict)."""

from helpers.lightning1_owner_records import RECORDED, under_trainmesh


def test_a_1x_bar_reads_1_9_5_s_batch_counters():
    assert under_trainmesh("bar_members") == RECORDED["bar_members"]
