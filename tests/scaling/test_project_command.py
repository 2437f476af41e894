"""``trainmesh project`` and ``trainmesh scale --link``: the tables, the calibration after a sweep
(on recorded timings: no processes) and projection.json, and the flags' spellings."""

import json
import re
from pathlib import Path

import pytest
import torch

from trainmesh.cli.main import main
from trainmesh.scaling.analysis import Measurement
from trainmesh.scaling.project_command import facts_from_model, report_sweep_projection, run_project_command
from trainmesh.scaling.projection import LINKS, ProjectionSettings, facts_from_count, project


def _table_row(out: str, title_start: str, n: int) -> list[str]:
    block = out[out.index(title_start) :]
    return next(line.split() for line in block.splitlines()[2:] if line.split()[:1] == [str(n)])


def test_project_from_numbers_prints_the_same_rows_as_the_formulas_and_writes_json(tmp_path, capsys):
    args = ["--parameters", "117e6", "--precision", "bf16-mixed", "--compute_ms", "29", "--batch", "16"]
    assert run_project_command([*args, "--out_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "117,000,000 trainable parameters (468 MB as trained, 234 MB as FSDP gathers them" in out
    assert "link infiniband-ndr: 400 Gb/s per device, 5 us per step" in out and "link 100gbe" in out
    expected = project(
        "fsdp", facts_from_count(117_000_000, "bf16-mixed"), compute_s=0.029, batch=16, link=LINKS["100gbe"]
    )[3]
    row = _table_row(out, "projected weak scaling: fsdp on 100gbe", 64)
    assert float(row[4]) == pytest.approx(expected.step_ms, rel=5e-3) and row[8] == f"{expected.efficiency:.2f}"
    saved = json.loads((tmp_path / "projection.json").read_text())
    assert [(p["strategy"], p["link"]["name"]) for p in saved["projections"]] == [
        ("ddp", "infiniband-ndr"),
        ("ddp", "100gbe"),
        ("fsdp", "infiniband-ndr"),
        ("fsdp", "100gbe"),
    ]
    points = saved["projections"][3]["rows"]
    assert [p["processes"] for p in points] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert points[3]["samples_per_s"] == pytest.approx(expected.samples_per_s)


def test_project_counts_a_models_flops_on_its_input(capsys):
    # nn.Linear(64, 10) on 32 rows: 2 x 32 x 64 x 10 forward and as many for the weight's gradient
    # (the input takes none) = 81,920 FLOPs; at 1 GFLOP/s x 0.5 that is 0.164 ms.
    args = ["--model", "torch.nn:Linear", "--model.in_features", "64", "--model.out_features", "10"]
    args += ["--batch_shape", "32,64", "--peak_flops", "1e9", "--mfu", "0.5", "--link", "400Gb/s", "--latency", "5us"]
    assert run_project_command(args) == 0
    out = capsys.readouterr().out
    assert "650 trainable parameters" in out
    assert "compute 0.164 ms a step at batch 32 per rank (8.19e+04 FLOPs counted / (1e+09 FLOP/s x MFU 0.5))" in out


def test_project_refuses_what_it_cannot_model(capsys):
    assert main(["project", "--parameters", "1e6", "--compute_ms", "1", "--strategy", "tp"]) == 2
    assert "the projection models ddp" in capsys.readouterr().err
    assert main(["project", "--parameters", "1e6"]) == 2
    assert "needs one rank's compute time per step" in capsys.readouterr().err
    assert main(["project", "--parameters", "1e6", "--compute_ms", "1", "--link", "400Gb/s"]) == 2
    assert "needs --latency" in capsys.readouterr().err


def test_the_sweep_projection_prints_measured_against_modelled_and_writes_json(tmp_path):
    measured = {
        "weak": [
            Measurement(1, 32, [0.002, 0.0021], [0.002, 0.002]),
            Measurement(2, 32, [0.0030], [0.0024]),
        ]
    }
    settings = ProjectionSettings((LINKS["infiniband-ndr"], LINKS["100gbe"]), overlap=0.5)
    printed: list[str] = []
    path, series = report_sweep_projection(
        measured,
        model_path="trainmesh.demo:DigitsClassifier",
        model_kwargs={},
        strategy="ddp",
        precision="32-true",
        settings=settings,
        out_dir=tmp_path,
        print_fn=printed.append,
    )
    out = "\n".join(printed)
    assert "26,122 trainable parameters" in out and "overlap 0.5" in out
    # N=2 sends 2 x 1/2 x 104,488 bytes in 0.6 ms (its synced step minus its unsynced one).
    assert "link fitted at N=2: 0.104 MB sent per rank in 0.6 ms" in out
    # Compute from N=1 (median 2.05 ms); N=2 modelled as that plus the fitted 0.6 ms.
    calibration = re.findall(r"^ *([12]) +(\S+) +(\S+) +(\S+)", out, re.MULTILINE)[:2]
    assert calibration == [("1", "2.05", "2.05", "1.00"), ("2", "3", "2.65", "1.13")]
    assert "projected weak scaling: ddp on infiniband-ndr, compute 2.05 ms a step at batch 32 per rank" in out
    saved = json.loads(Path(path).read_text())
    assert saved["calibration"]["weak"]["rows"][1]["modelled_ms"] == pytest.approx(2.65)
    assert len(saved["projections"]) == 2 and saved["settings"]["overlap"] == 0.5
    # The same projections, as the plot's dashed lines: one per link, N = 8 ... 1024.
    assert [s.label for s in series] == ["weak projected, infiniband-ndr", "weak projected, 100gbe"]
    first = saved["projections"][0]["rows"]
    assert series[0].processes == [row["processes"] for row in first] and series[0].processes[0] == 8
    assert series[0].efficiency == [row["efficiency"] for row in first]


def test_facts_from_a_model_count_as_estimate_memory_and_fsdp_units():
    model = torch.nn.Sequential(
        torch.nn.Embedding(100, 8), *[torch.nn.TransformerEncoderLayer(8, 2, 16) for _ in range(3)]
    )
    facts = facts_from_model(model, "bf16-mixed")
    from trainmesh.memory_estimate import estimate_memory

    assert facts.parameter_bytes == estimate_memory(model, strategy="ddp", precision="bf16-mixed").parameters
    assert facts.gathered_bytes * 2 == facts.parameter_bytes  # bf16 gathers of fp32 weights
    assert facts.units == 4 + 1  # the embedding and three layers, and the root
    assert facts.tensors == len(list(model.parameters()))


def test_scale_takes_both_flag_spellings_and_the_link(monkeypatch):
    import trainmesh.scaling as scaling
    from trainmesh.scaling.command import run_scale_command

    seen: dict = {}
    monkeypatch.setattr(scaling, "run_scaling", lambda **kwargs: seen.update(kwargs))
    assert run_scale_command(["--max_processes", "4", "--out_dir", "x", "--warmup_steps", "2"]) == 0
    assert (seen["max_processes"], seen["out_dir"], seen["warmup_steps"], seen["projection"]) == (4, "x", 2, None)
    assert (
        run_scale_command(["--max-processes", "2", "--peak-flops", "1e12", "--link", "nvlink", "--overlap", "0.3"]) == 0
    )
    assert seen["max_processes"] == 2 and seen["peak_flops"] == 1e12
    assert seen["projection"].links == (LINKS["nvlink"],) and seen["projection"].overlap == 0.3


def test_scale_refuses_a_projection_of_an_unmodelled_strategy_before_launching(tmp_path, capsys):
    assert main(["scale", "--strategy", "tp", "--link", "nvlink", "--out_dir", str(tmp_path)]) == 2
    assert "has no communication model to project with" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
