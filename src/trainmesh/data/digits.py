"""scikit-learn's bundled 8x8 digits (1797 images): a real data set that needs no download."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmesh.datamodule import DataModule

_NUM_SAMPLES = 1797  # fixed by the data set that ships inside scikit-learn


def _check_batching(batch_size: int, num_workers: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}; pass e.g. batch_size=32")
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(
            f"num_workers must be an integer >= 0, got {num_workers!r}; pass 0 to load in the main process"
        )


def _check_fractions(val_fraction: float, test_fraction: float) -> None:
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}; it is the share of the 1797 samples held out")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"val_fraction + test_fraction must be below 1 so that samples are left to train on, got "
            f"{val_fraction} + {test_fraction}; lower one of them"
        )


def split_sizes(num_samples: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """(train, val, test) sample counts; rounding goes to the held-out sets first, the rest trains.

    >>> split_sizes(1797, 0.1, 0.2)
    (1258, 180, 359)
    """
    num_val = round(num_samples * val_fraction)
    num_test = round(num_samples * test_fraction)
    return num_samples - num_val - num_test, num_val, num_test


def _load_digits() -> tuple[Any, Any]:
    """(data, target) as scikit-learn's ``load_digits()`` returns them, read the way it reads them
    (``np.loadtxt`` of the CSV it bundles) without importing scikit-learn: that import (scipy
    with it) cost 1.2 s of CPU in every process that set the data module up, each worker of a
    multi-process run included, against a few milliseconds for the file."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "DigitsDataModule reads the digits bundled with scikit-learn, which is not installed; "
            "install it with `pip install scikit-learn`"
        )
    path = Path(next(iter(spec.submodule_search_locations)), "datasets", "data", "digits.csv.gz")
    if not path.is_file():  # another layout of scikit-learn's files: its own reader knows it
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target
    import numpy as np

    with gzip.open(path, mode="rt", encoding="utf-8") as file:
        table = np.loadtxt(file, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int, copy=False)


class DigitsDataModule(DataModule):
    """The 8x8 handwritten digits, flattened to 64 features in [0, 1], with a seeded split.

    The train/val/test split depends only on ``seed`` (a private generator, never the global
    RNG), so every process of a distributed run and every rerun sees the same split.

    >>> dm = DigitsDataModule(batch_size=64, seed=0)
    >>> dm.setup("fit")
    >>> x, y = next(iter(dm.train_dataloader()))
    >>> tuple(x.shape), x.dtype, y.dtype
    ((64, 64), torch.float32, torch.int64)
    >>> len(dm.train_set), len(dm.val_set), len(dm.test_set)
    (1258, 180, 359)
    """

    num_features = 64
    num_classes = 10

    def __init__(
        self,
        batch_size: int = 32,
        seed: int = 0,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
    ) -> None:
        super().__init__()
        _check_batching(batch_size, num_workers)
        _check_fractions(val_fraction, test_fraction)
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.batch_size = batch_size
        self.seed = seed
        self.num_workers = num_workers
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        # The whole set is 1797 x 64 floats, so every stage builds all three splits at once;
        # repeated calls (fit, then test) reuse them.
        if self.train_set is not None:
            return
        data, target = _load_digits()
        inputs = torch.as_tensor(data, dtype=torch.float32) / 16.0  # pixel values are 0..16
        targets = torch.as_tensor(target, dtype=torch.int64)
        assert inputs.shape == (_NUM_SAMPLES, 64), inputs.shape

        generator = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(len(inputs), generator=generator)
        num_train, num_val, _ = split_sizes(len(inputs), self.val_fraction, self.test_fraction)
        train_idx = order[:num_train]
        val_idx = order[num_train : num_train + num_val]
        test_idx = order[num_train + num_val :]
        self.train_set = TensorDataset(inputs[train_idx], targets[train_idx])
        self.val_set = TensorDataset(inputs[val_idx], targets[val_idx])
        self.test_set = TensorDataset(inputs[test_idx], targets[test_idx])

    def _require(self, dataset: TensorDataset | None, loader: str) -> TensorDataset:
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__}.{loader}() was called before setup(); call setup('fit') first "
                "(the Trainer does this for you)"
            )
        return dataset

    def _loader(self, dataset: TensorDataset | torch.Tensor, *, shuffle: bool) -> DataLoader:
        # predict passes a tensor: its rows serve as a map-style dataset
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)  # type: ignore[arg-type]

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_set, "train_dataloader"), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_set, "val_dataloader"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.test_set, "test_dataloader"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        # A bare tensor is a valid map-style dataset, so batches are input tensors, not 1-tuples.
        inputs = self._require(self.test_set, "predict_dataloader").tensors[0]
        return self._loader(inputs, shuffle=False)
