"""Record pytorch-lightning 1.9.5 running ``lightning1_tuner_programs.measure`` (1.x programs that tune:
``trainer.tuner``'s two searches and ``trainer.tune`` before a fit) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_tuner.py

and rewrites ``tests/helpers/lightning_1_9_tuner.json``.
"""

from record_lightning_1_9_ported_programs import record

if __name__ == "__main__":
    record("lightning1_tuner_programs", "lightning_1_9_tuner.json")
