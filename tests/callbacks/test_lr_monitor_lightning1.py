"""A pytorch-lightning 1.x module's LearningRateMonitor logs its rates but leaves ``callback_metrics``
alone, as 1.9.5's (its lr_monitor.py never writes there; Lightning 2.6's does, and trainmesh's did for
every module: scout-l1 q06). Compared with 1.9.5's run of ``helpers/lightning1_owner_items.py``."""

from helpers.lightning1_owner_records import RECORDED, under_trainmesh


def test_a_1x_module_s_learning_rates_stay_out_of_callback_metrics_as_1_9_5():
    found = under_trainmesh("lr_monitor_metrics")
    assert found == RECORDED["lr_monitor_metrics"]
    assert "lr-SGD" not in found["callback_metrics"]
