"""``trainmesh scale`` on real processes (N = 1 and 2, gloo): the table, its verdict and the three files."""

import csv
import json
import os
import re
from pathlib import Path

import pytest

import trainmesh
from helpers.forked import can_fork, run_forked
from helpers.processes import run_program


@pytest.mark.slow
def test_scale_command_prints_table_with_mfu_and_verdict_and_writes_csv_json_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    src = str(Path(trainmesh.__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    launcher = (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "SLURM_NTASKS",
        "SLURM_PROCID",
    )
    arguments = ["scale", "--processes", "1,2", "--steps", "3", "--windows", "1", "--warmup-steps", "1"]
    arguments += ["--mode", "strong", "--peak-flops", "1e12", "--out-dir", str(tmp_path)]
    # A hang guard, not a time limit: at load 25 on 2 cores the run took more than 120 s (its old limit).
    if can_fork():
        # `python -m trainmesh` as a fork of the fork server (helpers/forked.py: torch and trainmesh
        # imported, 4.1 CPU-s in a new interpreter): what is checked is the sweep's table and files; the
        # command's workers are still spawned as new interpreters, as the command starts them. The CLI's
        # own process start is tests/cli's (test_cli_processes.py).
        environment = {k: v for k, v in os.environ.items() if k not in launcher}
        environment.update(env, OMP_NUM_THREADS="1")
        result = run_forked(
            Path(trainmesh.__file__).with_name("__main__.py"), arguments, env=environment, timeout=420, cwd=tmp_path
        )
    else:
        result = run_program(["-m", "trainmesh", *arguments], timeout=420, env=env, without=launcher)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    # The thread policy (the test sets OMP_NUM_THREADS=1 to spare the shared machine), then each
    # N's load before and during, are printed.
    assert lines[0] == "threads: 1 per process at every N (OMP_NUM_THREADS=1), set in every worker"
    loads = [line for line in lines if line.startswith(("N=1: load before:", "N=2: load before:"))]
    assert len(loads) == 2 and all("; during: " in line for line in loads)
    header = next(i for i, line in enumerate(lines) if line.startswith("N "))
    assert lines[header - 1] == "strong scaling (global batch fixed)"
    columns = re.split(r"\s{2,}", lines[header].strip())
    assert "MFU" in columns and "tokens/s" in columns
    rows = [dict(zip(columns, lines[header + i].split())) for i in (1, 2)]
    assert [row["N"] for row in rows] == ["1", "2"] and [row["batch/rank"] for row in rows] == ["64", "32"]
    assert [row["threads"] for row in rows] == ["1", "1"]  # set in each worker and read back
    # The digits batch is float pixels, not tokens; the FLOPs were counted and --peak-flops given.
    assert all(row["tokens/s"] == "-" and re.fullmatch(r"\d+\.\d%", row["MFU"]) for row in rows)
    verdict = next(line for line in lines[header + 3 :] if not line.startswith(("*", "spread:")))
    assert verdict.startswith(("N=2 runs at", "scaling pays up to N=", "N=2 measured", "verdict withheld")), verdict
    with open(tmp_path / "scaling.csv") as file:
        table = list(csv.DictReader(file))
    assert {"mode", "processes", "speedup", "efficiency", "mfu", "tokens_per_s", "noisy"} <= set(table[0])
    assert [(r["mode"], r["processes"]) for r in table] == [("strong", "1"), ("strong", "2")]
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert [r["processes"] for r in saved["rows"]] == [1, 2] and saved["settings"]["peak_flops"] == 1e12
    assert all(0 < r["mfu"] < 1 for r in saved["rows"]) and saved["rows"][0]["speedup"] == 1.0
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scale_takes_the_configs_strategy_precision_and_says_what_it_leaves(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import trainmesh.scaling as scaling
    from trainmesh.scaling.command import run_scale_command

    config = tmp_path / "fit.yaml"
    config.write_text("trainer:\n  strategy: fsdp\n  precision: bf16-mixed\n  max_epochs: 3\nmodel:\n  hidden: 64\n")
    seen: dict = {}
    monkeypatch.setattr(scaling, "run_scaling", lambda **kwargs: seen.update(kwargs))
    assert run_scale_command(["--config", str(config), "--max-processes", "1"]) == 0
    assert (seen["strategy"], seen["precision"], seen["accelerator"]) == ("fsdp", "bf16-mixed", "cpu")
    assert seen["model_kwargs"] == {"hidden": 64}
    assert "trainer settings max_epochs are not applied" in capsys.readouterr().out
    # A flag wins over the config.
    assert run_scale_command(["--config", str(config), "--precision", "32-true", "--strategy", "ddp"]) == 0
    assert (seen["strategy"], seen["precision"]) == ("ddp", "32-true")


def test_thread_policy_fixes_one_count_for_every_n_and_says_which(monkeypatch) -> None:
    from trainmesh.scaling import thread_policy

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    # The same compute per process at every N: the cores shared out for the largest N, at every N.
    assert thread_policy(None, 8, [1, 2, 4]) == (
        2,
        "threads: 2 per process at every N (8 physical cores // the largest N, 4), set in every worker; "
        "--threads T sets another count",
    )
    assert thread_policy(None, 8, [1, 2, 4, 16])[0] == 1  # never below one thread
    assert thread_policy(2, 8, [1, 2])[0] == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert thread_policy(None, 8, [1, 2]) == (
        3,
        "threads: 3 per process at every N (OMP_NUM_THREADS=3), set in every worker",
    )
    assert thread_policy(1, 8, [1, 2])[1].endswith("(--threads 1), set in every worker")  # the flag wins
    with pytest.raises(ValueError, match="threads=0; pass a positive count"):
        thread_policy(0, 8, [1])
