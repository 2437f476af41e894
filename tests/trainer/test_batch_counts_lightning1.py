"""``trainer.num_*_batches`` against pytorch-lightning 1.9.5, recorded as data
(``tests/helpers/record_lightning_1_9_batch_counts.py`` writes ``lightning_1_9_batch_counts.json`` in
1.9.5's own venv): the same program as ``test_differential_programs_unseen.py::test_batch_counts_are_lightning_s_lists``,
which compares it with Lightning 2.6 run live.

The names are the same in 1.9.5 and 2.6 and a program using them uses no 1.x-only API, so trainmesh
cannot tell which release it was written for; it answers as 2.6 (as for every name the two share),
and the one place 1.9.5 differs is pinned here.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import trainmesh as tm
from helpers.batch_count_program import reading_batch_counts

RECORDED = Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_batch_counts.json"
# after trainer.validate, 1.9.5 keeps validate's list in num_val_batches through a later test and
# predict; 2.6 (and trainmesh) give the fit's again once validate has ended
AFTER_VALIDATE = (
    "on_test_start",
    "on_test_epoch_end",
    "after test",
    "on_predict_start",
    "on_predict_end",
    "after predict",
)


def test_batch_counts_are_1_9_5_s_but_num_val_batches_after_validate(tmp_path):
    recorded = json.loads(RECORDED.read_text())["readings"]
    tm.seed_everything(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = reading_batch_counts(SimpleNamespace(pl=tm), tmp_path)
    assert [moment for moment, _ in ours] == [moment for moment, _ in recorded]
    differing = {
        (moment, name): (theirs[name], mine[name])
        for (moment, mine), (_, theirs) in zip(ours, recorded)
        for name in theirs
        if theirs[name] != mine[name]
    }
    assert differing == {(moment, "num_val_batches"): ([2], [2, 1]) for moment in AFTER_VALIDATE}
