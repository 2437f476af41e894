"""A seeded, learnable classification set generated in memory, for benchmarks and tests."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmesh.datamodule import DataModule


def _check_sizes(num_samples: int, num_features: int, num_classes: int, seed: int) -> None:
    limits = (
        ("num_samples", num_samples, 1),
        ("num_features", num_features, 1),
        ("num_classes", num_classes, 2),  # argmax over one class would be a constant label
        ("seed", seed, 0),
    )
    for name, value, low in limits:
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _sample(num_samples: int, teacher: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.randn(num_samples, teacher.shape[0], generator=generator)
    # Labels from a fixed linear teacher: a linear model can reach 100%, so loss curves in
    # benchmarks go down rather than plateau at chance.
    return inputs, (inputs @ teacher).argmax(dim=1)


def _teacher(num_features: int, num_classes: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(num_features, num_classes, generator=generator)


def make_classification_tensors(
    num_samples: int, num_features: int, num_classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs float32 (num_samples, num_features) ~ N(0, 1) and int64 targets from a random
    linear teacher, both fixed by ``seed`` (a private generator; the global RNG is untouched).

    >>> x, y = make_classification_tensors(8, 4, 3, seed=0)
    >>> tuple(x.shape), x.dtype, tuple(y.shape), y.dtype
    ((8, 4), torch.float32, (8,), torch.int64)
    """
    _check_sizes(num_samples, num_features, num_classes, seed)
    generator = torch.Generator().manual_seed(seed)
    teacher = _teacher(num_features, num_classes, generator)
    return _sample(num_samples, teacher, generator)


class SyntheticDataModule(DataModule):
    """``num_samples`` training samples from :func:`make_classification_tensors`, plus val and
    test sets of ``num_samples // 4`` each (at least 1) labelled by the same teacher.

    The training set equals ``make_classification_tensors(num_samples, num_features,
    num_classes, seed)``. The train loader keeps its order unless ``shuffle=True``, so that
    benchmark runs see identical batches. Predict batches are the test inputs.

    >>> dm = SyntheticDataModule(num_samples=64, num_features=8, batch_size=16)
    >>> dm.setup("fit")
    >>> x, y = next(iter(dm.train_dataloader()))
    >>> tuple(x.shape), tuple(y.shape), len(dm.val_set)
    ((16, 8), (16,), 16)
    """

    def __init__(
        self,
        num_samples: int = 4096,
        num_features: int = 784,
        num_classes: int = 10,
        batch_size: int = 16,
        seed: int = 0,
        shuffle: bool = False,
    ) -> None:
        super().__init__()
        _check_sizes(num_samples, num_features, num_classes, seed)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}; pass e.g. batch_size=16")
        self.num_samples = num_samples
        self.num_features = num_features
        self.num_classes = num_classes
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        # One generator drawn in a fixed order (teacher, train, val, test): the training set is
        # exactly make_classification_tensors(...) and the held-out sets share its teacher.
        generator = torch.Generator().manual_seed(self.seed)
        teacher = _teacher(self.num_features, self.num_classes, generator)
        num_holdout = max(1, self.num_samples // 4)
        self.train_set = TensorDataset(*_sample(self.num_samples, teacher, generator))
        self.val_set = TensorDataset(*_sample(num_holdout, teacher, generator))
        self.test_set = TensorDataset(*_sample(num_holdout, teacher, generator))

    def _require(self, dataset: TensorDataset | None, loader: str) -> TensorDataset:
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__}.{loader}() was called before setup(); call setup('fit') first "
                "(the Trainer does this for you)"
            )
        return dataset

    def _loader(self, dataset: TensorDataset | torch.Tensor, *, shuffle: bool) -> DataLoader:
        # predict passes a tensor: its rows serve as a map-style dataset
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle)  # type: ignore[arg-type]

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_set, "train_dataloader"), shuffle=self.shuffle)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_set, "val_dataloader"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.test_set, "test_dataloader"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        # A bare tensor is a valid map-style dataset, so batches are input tensors, not 1-tuples.
        return self._loader(self._require(self.test_set, "predict_dataloader").tensors[0], shuffle=False)
