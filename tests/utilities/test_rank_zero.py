"""Which process is global rank 0 (utilities/rank_zero.py): the process group's rank once it is up."""

import torch

from trainmesh.loggers import CSVLogger
from trainmesh.utilities.rank_zero import rank_zero_only


def test_a_process_the_user_started_on_the_second_node_is_not_rank_zero_once_the_group_is_up(monkeypatch, tmp_path):
    # Processes started by hand on two nodes (LOCAL_RANK=0 and NODE_RANK on each, no RANK): the environment
    # alone says rank 0 on both; the process group (rank NODE_RANK * devices + LOCAL_RANK) says 1 here, as
    # Lightning's strategy then sets rank_zero_only.rank. Before, both processes wrote the loggers' files.
    for name in ("RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "1")
    assert rank_zero_only.rank == 0  # no group yet: the environment's word
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    assert rank_zero_only.rank == 1
    logger = CSVLogger(tmp_path, name="csv", version=0)
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.save()
    assert not (tmp_path / "csv" / "version_0" / "metrics.csv").exists()
