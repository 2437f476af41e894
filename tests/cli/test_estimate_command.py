"""``trainmesh estimate``: its input from --batch_shape (token ids for a model that starts with an
embedding), the data module's first batch or example_input_array; --model.* and --config as for
fit; a clear error for a batch the model cannot take and for a precision fit refuses."""

import sys

import pytest

from trainmesh.cli.main import main

_GPT_SOURCE = '''
import torch
from torch import nn

import trainmesh as tm


class GPT(tm.Module):
    """The README's shape of model: token ids in, an embedding first."""

    def __init__(self, vocab: int = 64, width: int = 16, example: bool = False):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.block = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.head = nn.Linear(width, vocab)
        if example:
            self.example_input_array = torch.randint(0, vocab, (4, 8))

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))

    def training_step(self, batch, batch_idx):
        return self(batch[0]).sum()


class Tokens(tm.DataModule):
    def __init__(self, batch_size: int = 6, length: int = 8):
        super().__init__()
        self.batch_size, self.length = batch_size, length

    def train_dataloader(self):
        tokens = torch.randint(0, 64, (24, self.length))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=self.batch_size)
'''


@pytest.fixture
def gpt_module(tmp_path, monkeypatch):
    (tmp_path / "estimate_gpt_helpers.py").write_text(_GPT_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "estimate_gpt_helpers"
    sys.modules.pop("estimate_gpt_helpers", None)


def _activations(out: str, strategy: str = "ddp") -> float:
    line = next(line for line in out.splitlines() if line.startswith(f"{strategy} "))
    return float(line.split("activations ")[1].split()[0])


def test_a_gpt_takes_token_ids_from_batch_shape(gpt_module, capsys):
    assert main(["estimate", "--model", f"{gpt_module}:GPT", "--batch_shape", "4,32", "--strategy", "ddp"]) == 0
    out = capsys.readouterr().out
    assert "input: a random batch of shape (4, 32) (token ids below 64, for the nn.Embedding it starts with)" in out
    assert _activations(out) > 0


def test_the_input_comes_from_the_data_module_or_example_input_array(gpt_module, capsys):
    model = f"{gpt_module}:GPT"
    assert main(["estimate", "--model", model, "--data", f"{gpt_module}:Tokens", "--strategy", "ddp"]) == 0
    from_data = capsys.readouterr().out
    assert "input: one training batch of Tokens" in from_data
    assert main(["estimate", "--model", model, "--model.example", "true", "--strategy", "ddp"]) == 0
    from_example = capsys.readouterr().out
    assert "input: GPT.example_input_array" in from_example
    # Activations grow with the rows: the data's 6 rows against the example's 4, at one length.
    assert _activations(from_data) > _activations(from_example) > 0
    assert main(["estimate", "--model", model, "--strategy", "ddp"]) == 0
    assert "input: no input (activations not counted" in capsys.readouterr().out


def test_model_arguments_and_a_config_as_for_fit(gpt_module, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model:\n  class_path: {gpt_module}:GPT\n  vocab: 100\ndata:\n  class_path: {gpt_module}:Tokens\n"
        "  batch_size: 3\ntrainer:\n  precision: bf16-mixed\n"
    )
    assert main(["estimate", "--config", str(config), "--model.width", "8", "--strategy", "fsdp"]) == 0
    out = capsys.readouterr().out
    # vocab 100, width 8: 800 + (8*32+32) + (32*8+8) + (8*100+100) = 2,252 parameters.
    assert f"{gpt_module}:GPT: 2,252 parameters" in out and "precision bf16-mixed" in out
    assert "input: one training batch of Tokens" in out


def test_a_batch_the_model_cannot_take_is_one_clear_error(capsys):
    # The demo MLP takes 64 features; 7 is a mistake, said in a sentence, not a torch traceback.
    assert main(["estimate", "--batch_shape", "4,7"]) == 2
    err = capsys.readouterr().err
    assert "trainmesh.demo:DigitsClassifier's forward failed on a random float batch of shape (4, 7)" in err
    assert "Pass --batch_shape with the shape its forward takes" in err and "Traceback" not in err
    assert main(["estimate", "--batch_shape", "4,x"]) == 2
    assert "give sizes separated by commas" in capsys.readouterr().err


def test_a_precision_fit_refuses_is_refused(capsys):
    assert main(["estimate", "--precision", "8-true"]) == 2
    assert "precision='8-true' is not known" in capsys.readouterr().err
    assert main(["estimate", "--precision", "bf16", "--strategy", "ddp"]) == 0  # fit's alias
    assert "precision bf16-mixed" in capsys.readouterr().out
