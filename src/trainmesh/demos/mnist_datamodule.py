"""Lightning's ``demos.mnist_datamodule``: ``MNISTDataModule``, ``MNIST`` and the hosted copy ``_MNIST``,
as Lightning 2.6 defines them, so that its example programs port by renaming the import.

``MNIST(...)`` is torchvision's MNIST when torchvision is installed; with the environment variable
``PL_USE_MOCKED_MNIST`` set (or when torchvision's download fails with an HTTP error) it is
``_MNIST``: ``training.pt`` / ``test.pt`` under ``<root>/MNIST/complete`` (a ``(uint8 images
(N, 28, 28), labels)`` pair each), downloaded from Lightning's bucket when absent. The data module
splits the training file into ``len - val_split`` and ``val_split`` samples with Lightning's seed (42),
and its loaders are Lightning's (shuffled training, ``drop_last``, ``pin_memory``).

>>> MNISTDataModule(batch_size=8).num_classes
10
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
import urllib.request
from collections.abc import Callable, Sized
from typing import Any
from urllib.error import HTTPError
from warnings import warn

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from trainmesh.datamodule import DataModule
from trainmesh.utilities.imports import _TORCHVISION_AVAILABLE

__all__ = ["MNIST", "MNISTDataModule"]

_DATASETS_PATH = "./data"


class _MNIST(Dataset):
    """Lightning's hosted MNIST: ``(image (1, 28, 28) float, label int)``, normalized by ``normalize``."""

    RESOURCES = (
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/training.pt",
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/test.pt",
    )
    TRAIN_FILE_NAME = "training.pt"
    TEST_FILE_NAME = "test.pt"
    cache_folder_name = "complete"

    def __init__(
        self, root: str, train: bool = True, normalize: tuple = (0.1307, 0.3081), download: bool = True, **kwargs: Any
    ) -> None:
        super().__init__()
        self.root = root
        self.train = train
        self.normalize = normalize
        self.prepare_data(download)
        data_file = self.TRAIN_FILE_NAME if self.train else self.TEST_FILE_NAME
        self.data, self.targets = self._try_load(os.path.join(self.cached_folder_path, data_file))

    def __getitem__(self, idx: int) -> tuple[Tensor, int]:
        img = self.data[idx].float().unsqueeze(0)
        target = int(self.targets[idx])
        if self.normalize is not None and len(self.normalize) == 2:
            img = self.normalize_tensor(img, *self.normalize)
        return img, target

    def __len__(self) -> int:
        return len(self.data)

    @property
    def cached_folder_path(self) -> str:
        return os.path.join(self.root, "MNIST", self.cache_folder_name)

    def _check_exists(self, data_folder: str) -> bool:
        return all(os.path.isfile(os.path.join(data_folder, f)) for f in (self.TRAIN_FILE_NAME, self.TEST_FILE_NAME))

    def prepare_data(self, download: bool = True) -> None:
        if download and not self._check_exists(self.cached_folder_path):
            self._download(self.cached_folder_path)
        if not self._check_exists(self.cached_folder_path):
            raise RuntimeError("Dataset not found.")

    def _download(self, data_folder: str) -> None:
        os.makedirs(data_folder, exist_ok=True)
        for url in self.RESOURCES:
            logging.info(f"Downloading {url}")
            urllib.request.urlretrieve(url, os.path.join(data_folder, os.path.basename(url)))  # noqa: S310

    @staticmethod
    def _try_load(path_data: str, trials: int = 30, delta: float = 1.0) -> tuple[Tensor, Tensor]:
        """Load the file, retrying a while: several processes may be writing it at the same time."""
        assert os.path.isfile(path_data), f"missing file: {path_data}"
        res, exception = None, None
        for _ in range(trials):
            try:
                res = torch.load(path_data)
            except Exception as ex:
                exception = ex
                time.sleep(delta * random.random())  # noqa: S311 (as Lightning's: draws from `random`)
            else:
                break
        assert res is not None
        if exception is not None:  # Lightning's: a failed try raises even when a later one loaded
            raise exception
        return res

    @staticmethod
    def normalize_tensor(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
        mean_t = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device)
        std_t = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device)
        return tensor.sub(mean_t).div(std_t)


def MNIST(*args: Any, **kwargs: Any) -> Dataset:  # noqa: N802 (Lightning's name)
    """torchvision's MNIST, or ``_MNIST`` under ``PL_USE_MOCKED_MNIST`` or after an HTTP error."""
    use_torchvision = not bool(os.getenv("PL_USE_MOCKED_MNIST", False))
    if use_torchvision:
        try:
            from torchvision.datasets import MNIST as TorchvisionMNIST  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "MNIST(...) reads torchvision's MNIST, and torchvision is not installed: install it, or set the "
                "environment variable PL_USE_MOCKED_MNIST=1 to read Lightning's hosted copy (as Lightning does)",
                name="torchvision",
            ) from error
        try:
            TorchvisionMNIST(_DATASETS_PATH, download=True)
            return TorchvisionMNIST(*args, **kwargs)
        except HTTPError as ex:
            print(f"Error {ex} downloading `torchvision.datasets.MNIST`")
    print("`torchvision.datasets.MNIST` not available. Using our hosted version")
    return _MNIST(*args, **kwargs)


class MNISTDataModule(DataModule):
    """Standard MNIST: train and validation split from the training file, test from the test file.

    Args:
        data_dir: Where the files are saved and read.
        val_split: How many training images make the validation split.
        num_workers: Workers of each loader (0 on Windows, with a warning, as Lightning).
        normalize: With torchvision, normalize the images to mean 0.5, std 0.5.
        seed: Kept as Lightning keeps it (the split uses seed 42 whatever it is).
        batch_size: Batch size of every loader.

    Examples:
        >>> dm = MNISTDataModule(data_dir="./data", val_split=5000, num_workers=0, batch_size=32)
        >>> dm.name
        'mnist'
    """

    name = "mnist"

    def __init__(
        self,
        data_dir: str = _DATASETS_PATH,
        val_split: int = 5000,
        num_workers: int = 16,
        normalize: bool = False,
        seed: int = 42,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        if num_workers and sys.platform == "win32":
            warn(
                f"You have requested num_workers={num_workers} on Windows,"
                " but currently recommended is 0, so we set it for you",
                stacklevel=2,
            )
            num_workers = 0
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def prepare_data(self) -> None:
        """Saves the MNIST files to ``data_dir``."""
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str) -> None:
        """Split the training file into the train and validation sets (seed 42, as Lightning)."""
        extra = {"transform": self.default_transforms} if self.default_transforms else {}
        dataset: Dataset = MNIST(self.data_dir, train=True, download=False, **extra)
        assert isinstance(dataset, Sized)
        train_length = len(dataset)
        self.dataset_train, self.dataset_val = random_split(
            dataset, [train_length - self.val_split, self.val_split], generator=torch.Generator().manual_seed(42)
        )

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            drop_last=True,
            pin_memory=True,
        )

    def train_dataloader(self) -> DataLoader:
        """The training split, shuffled."""
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """The validation split (taken from the training file)."""
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """The test file."""
        extra = {"transform": self.default_transforms} if self.default_transforms else {}
        return self._loader(MNIST(self.data_dir, train=False, download=False, **extra), shuffle=False)

    @property
    def default_transforms(self) -> Callable | None:
        """torchvision's ``ToTensor`` (and ``Normalize`` with ``normalize``); None without torchvision."""
        if not _TORCHVISION_AVAILABLE:
            return None
        from torchvision import transforms  # type: ignore[import-not-found,unused-ignore]

        if self.normalize:
            return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))])
        return transforms.ToTensor()
