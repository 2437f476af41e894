"""Five ddp programs in one launch, one after another in the same processes: ``python
lightning_ddp_run.py lightning|trainmesh OUT``. Each program's ``main`` writes under
``OUT/<program>`` what its test compares with Lightning 2.6's run of it:

- evaluation_shares_run.py: test_evaluation_shares.py;
- sampler_ddp_run.py: test_lightning_sampler_ddp.py;
- precision_ddp_run.py: test_precision_flag.py;
- ddp_program_run.py: test_differential_programs_more.py;
- helpers/trainer_members_ddp.py: test_lightning_members_ddp.py.

Each framework's run is 2 forks in one process group (helpers/beside_lightning.py,
``lightning_starts=False``): every Trainer finds its processes started, as under torchrun (run by
Lightning's own launcher, the first fit starts the second process, which runs this script: the same
programs in the same order). The order matters where a program reads the seed a process has before any
``seed_everything`` (the default sampler's, 0): evaluation_shares_run.py never seeds, and
sampler_ddp_run.py's first case runs unseeded; each program after them seeds its own runs.
"""

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers.trainer_members_ddp

PROGRAMS = (
    "evaluation_shares_run",
    "sampler_ddp_run",
    "precision_ddp_run",
    "ddp_program_run",
    "helpers.trainer_members_ddp",
)


def main(framework: str, out: Path) -> None:
    for name in PROGRAMS:
        program = importlib.import_module(name)  # picks its framework from sys.argv[1]
        folder = out / name.rsplit(".", 1)[-1]
        if name in ("sampler_ddp_run", "helpers.trainer_members_ddp"):
            program.main(framework, folder)
        else:
            program.main(folder)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
