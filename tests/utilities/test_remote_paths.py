"""A remote URL where trainmesh would write stops at construction with the reason: before, a
``default_root_dir``/``dirpath``/``save_dir`` of ``s3://bucket/run`` made a local folder named ``s3:``
and the run's checkpoints and logs never reached the store (Lightning writes there through fsspec)."""

from __future__ import annotations

import pytest

import trainmesh as tm
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.loggers import CSVLogger, TensorBoardLogger

BUILDERS = {
    "Trainer(default_root_dir)": lambda url: tm.Trainer(default_root_dir=url, accelerator="cpu", logger=False),
    "ModelCheckpoint(dirpath)": lambda url: ModelCheckpoint(dirpath=url),
    "CSVLogger(save_dir)": lambda url: CSVLogger(save_dir=url),
    "TensorBoardLogger(save_dir)": lambda url: TensorBoardLogger(save_dir=url),
}


@pytest.mark.parametrize("where", list(BUILDERS))
def test_a_remote_url_is_refused_before_anything_is_written(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"remote URL \(s3://\).*local files only"):
        BUILDERS[where]("s3://bucket/run")
    assert list(tmp_path.iterdir()) == []  # no local "s3:" folder


def test_local_paths_and_file_urls_pass(tmp_path):
    ModelCheckpoint(dirpath=tmp_path / "a")
    assert CSVLogger(save_dir=f"file://{tmp_path}").save_dir == str(tmp_path)
    tm.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False)
