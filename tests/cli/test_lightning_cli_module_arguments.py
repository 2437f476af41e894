"""cli/lightning_cli_advanced_3.rst's model taking ``nn.Module`` arguments (``encoder: nn.Module``,
given in the config as ``class_path`` / ``init_args``) with ``self.save_hyperparameters()``: Lightning's
CLI hands ``save_hyperparameters`` the config's values, so it does not warn "Attribute 'encoder' is an
instance of `nn.Module`"; trainmesh warned once per such argument (then stored the config's values too).
The same program built directly, outside the CLI, warns under both."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("lightning.pytorch")


def _warned(pl, cli_module, through_cli: bool) -> list[str]:
    class EncoderDecoder(pl.LightningModule):
        def __init__(self, encoder: torch.nn.Module, decoder: torch.nn.Module):
            super().__init__()
            self.save_hyperparameters()
            self.encoder, self.decoder = encoder, decoder

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if through_cli:
            cli = cli_module.LightningCLI(
                EncoderDecoder,
                run=False,
                args=[
                    "--model.encoder=torch.nn.Linear",
                    "--model.encoder.in_features=4",
                    "--model.encoder.out_features=2",
                    "--model.decoder=torch.nn.Linear",
                    "--model.decoder.in_features=2",
                    "--model.decoder.out_features=1",
                    "--trainer.logger=false",
                ],
            )
            assert cli.model.hparams["encoder"]["class_path"] == "torch.nn.Linear"
        else:
            EncoderDecoder(torch.nn.Linear(4, 2), torch.nn.Linear(2, 1))
    return sorted(str(w.message) for w in caught if "instance of `nn.Module`" in str(w.message))


@pytest.mark.parametrize("through_cli", [True, False])
def test_module_arguments_warn_as_lightning(through_cli, tmp_path, monkeypatch):
    import lightning.pytorch as lightning
    from lightning.pytorch import cli as lightning_cli

    import trainmesh
    from trainmesh import cli as trainmesh_cli

    monkeypatch.chdir(tmp_path)
    theirs = _warned(lightning, lightning_cli, through_cli)
    ours = _warned(trainmesh, trainmesh_cli, through_cli)
    assert len(theirs) == (0 if through_cli else 2)
    assert ours == theirs
