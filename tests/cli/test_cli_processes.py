"""``trainmesh fit`` in real processes: every strategy prints the folder it really logged to,
and fit and test share it."""

import os
from pathlib import Path

import pytest

import trainmesh
from helpers.forked import can_fork, run_forked
from helpers.processes import run_program

HERE = Path(__file__).parent

_TINY_RUN = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "2",
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "2",
    "--trainer.limit_val_batches",
    "1",
    "--trainer.limit_test_batches",
    "1",
    "--trainer.num_sanity_val_steps",
    "0",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


_LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
)


def _run_cli(cwd: Path, *args: str, timeout: float = 240, forked: bool = False) -> tuple[str, str]:
    """``python -m trainmesh ARGS`` in its own session; on timeout the whole session is killed,
    workers included, and the test fails instead of hanging. ``forked``: as a fork of the fork
    server (helpers/forked.py), which imported torch and trainmesh already. Returns stdout (what the
    CLI prints) and stderr (what trainmesh logs, as Lightning's lines)."""
    src = str(Path(trainmesh.__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    if forked and can_fork():
        clean = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
        environment = {**clean, "OMP_NUM_THREADS": "1", **env}
        result = run_forked(HERE / "cli_main_run.py", list(args), env=environment, timeout=timeout, cwd=cwd)
    else:
        result = run_program(["-m", "trainmesh", *args], timeout=timeout, env=env, without=_LAUNCHER_VARIABLES, cwd=cwd)
    out, err = result.stdout, result.stderr
    assert result.returncode == 0, out[-3000:] + err[-3000:]
    return out, err


def _printed(out: str, label: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(f"{label}: "))


# ddp_spawn's launcher (SpawnLauncher: everything pickled to workers that start without this
# process's state, rank 0's result pickled back) with the "forkserver" start: its workers fork from
# a server that imported torch and trainmesh once (cli_main_run.py), where "spawn" started four
# new interpreters (2 for fit, 2 for the test), each importing torch, dynamo and the CLI (about
# 5 CPU-s each): 33.1 -> 14.9 CPU-s. What "spawn" itself does at start is test_launch_processes.py's
# (spawn_run.py); the CLI's "ddp_spawn" string is parsed in test_cli.py.
STRATEGY = {
    "ddp_spawn": [
        "--trainer.strategy",
        '{"class_path": "trainmesh.strategies.DDPStrategy", "init_args": {"start_method": "forkserver"}}',
    ],
    "ddp_fork": ["--trainer.strategy", "ddp_fork"],
    "ddp": ["--trainer.strategy", "ddp"],
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGY))
def test_fit_and_test_log_to_the_printed_folder(tmp_path, strategy):
    # ckpt_path="last" on a first run starts from scratch, with Lightning's one warning (from rank 0 only).
    # The summary on: rank 0 alone prints each stage's start line (fit, then the CLI's test);
    # ddp_spawn and ddp_fork are ddp started another way. Their command is a fork that already
    # imported torch and trainmesh (their workers forks of it or of its fork server); ddp's is
    # `python -m trainmesh`, which its agent re-runs as such.
    out, err = _run_cli(
        tmp_path,
        "fit",
        *STRATEGY[strategy],
        "--ckpt_path",
        "last",
        *_TINY_RUN,
        "--trainer.enable_model_summary",
        "true",
        forked=strategy != "ddp",
    )
    assert err.count('.fit(ckpt_path="last") is set, but there is no last checkpoint available.') == 1, err
    for stage in ("fit", "test"):
        assert (
            err.count(
                f"trainmesh {stage}: strategy ddp, 2 processes (2 per node x 1 node), "
                "mesh dp_replicate=2, device cpu, precision 32-true, global batch "
            )
            == 1
        ), err
    logs = Path(_printed(out, "logs"))
    # The same default as the Python API and Lightning: TensorBoard in <cwd>/lightning_logs/version_N.
    assert logs == tmp_path / "lightning_logs" / "version_0"
    assert sorted(p.name for p in logs.parent.iterdir()) == ["version_0"], "one run, one version folder"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logs))
    events.Reload()
    assert {"val_loss", "test_loss"} <= set(events.Tags()["scalars"])
    assert Path(_printed(out, "last checkpoint")).parent == logs / "checkpoints"
