"""Record pytorch-lightning 1.9.5 running ``lightning1_owner_items.measure`` (small 1.x programs for the
owner-small7 items: LearningRateMonitor and callback_metrics, metrics.csv's column order, a weights-only
checkpoint's keys, ProgressBarBase's counters, the setup calls around ``trainer.tune``) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_owner_items.py

and rewrites ``tests/helpers/lightning_1_9_owner_items.json``.
"""

from record_lightning_1_9_ported_programs import record

if __name__ == "__main__":
    record("lightning1_owner_items", "lightning_1_9_owner_items.json")
