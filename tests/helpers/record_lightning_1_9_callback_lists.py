"""Record pytorch-lightning 1.9.5 running ``lightning1_callback_lists.measure`` (l1-progs19: the
``GradientAccumulationScheduler`` 1.9.5 lists in every Trainer, the factor at an epoch's start, a
CSVLogger's ``hparams.yaml`` after ``trainer.tune``) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_callback_lists.py

and rewrites ``tests/helpers/lightning_1_9_callback_lists.json``.
"""

from record_lightning_1_9_ported_programs import record

if __name__ == "__main__":
    record("lightning1_callback_lists", "lightning_1_9_callback_lists.json")
