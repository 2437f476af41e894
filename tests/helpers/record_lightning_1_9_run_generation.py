"""Record pytorch-lightning 1.9.5 running ``lightning1_run_generation.measure`` (a 1.x run's
``trainer.precision`` and ddp's ``find_unused_parameters`` default, decided by the run's generation) as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make one):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_run_generation.py

and rewrites ``tests/helpers/lightning_1_9_run_generation.json``.
"""

from record_lightning_1_9_ported_programs import record

if __name__ == "__main__":
    record("lightning1_run_generation", "lightning_1_9_run_generation.json")
