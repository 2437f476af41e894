"""The cosmetic names Lightning programs import from the package: ``cli_lightning_logo`` (here
trainmesh's banner) and ``_logger`` (the package's ``logging.Logger``)."""

import logging

import trainmesh
from trainmesh import _logger, cli_lightning_logo


def test_cli_lightning_logo_prints_trainmeshs_banner(capsys):
    cli_lightning_logo()
    out = capsys.readouterr().out
    assert "trained on one device or many" in out and "\033[" not in out  # no colour codes off a terminal


def test_the_package_logger_is_trainmeshs_and_shows_info(caplog):
    assert isinstance(_logger, logging.Logger) and _logger is logging.getLogger("trainmesh")
    assert trainmesh._logger.getEffectiveLevel() == logging.INFO
    propagate, _logger.propagate = _logger.propagate, True  # so that caplog, at the root, sees it
    try:
        with caplog.at_level(logging.INFO, logger="trainmesh"):
            _logger.info("epoch %d done", 3)
    finally:
        _logger.propagate = propagate
    assert [record.getMessage() for record in caplog.records] == ["epoch 3 done"]
