"""metrics.csv's columns for a pytorch-lightning 1.x module are in the order the names first appear, as
1.9.5's CSVLogger writes them (its save gathers the rows' keys with ``dict.update``); Lightning 2's (and a
2.x module's here) are sorted. Compared with 1.9.5's run of ``helpers/lightning1_owner_items.py``."""

from helpers.lightning1_owner_records import RECORDED, under_trainmesh


def test_a_1x_module_s_metrics_csv_header_is_in_first_appearance_order_as_1_9_5():
    found = under_trainmesh("csv_columns")
    assert found == RECORDED["csv_columns"]
    assert found["header"][:2] == ["zeta", "alpha"]
