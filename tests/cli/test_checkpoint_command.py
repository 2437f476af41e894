"""``trainmesh checkpoint inspect`` on files the Trainer did not write: it says what they are."""

import torch

from trainmesh.cli.main import main


def test_inspect_names_a_bare_state_dict_and_how_to_load_it(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    assert main(["checkpoint", "inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{path}: a bare state_dict (what torch.save(model.state_dict(), ...) writes)")
    assert "model.load_state_dict(torch.load(path))" in out[0]
    assert out[1:] == ["  2 tensors, 8 values", "    weight: [2, 3] float32", "    bias: [2] float32"]


def test_inspect_names_another_dict(tmp_path, capsys):
    path = tmp_path / "other.pt"
    torch.save({"model": torch.nn.Linear(3, 2).state_dict(), "step": 3}, path)
    assert main(["checkpoint", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "a dict saved with torch.save, not a trainmesh checkpoint" in out and "['model', 'step']" in out
