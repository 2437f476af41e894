"""MNIST from the four standard IDX files on local disk (trainmesh never downloads)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmesh.datamodule import DataModule

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
EXPECTED_FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)

# IDX magic: two zero bytes, a type code (0x08 = unsigned byte), then the number of dimensions.
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


def _open(path: Path, mode: str) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return gzip.open(path, mode)  # type: ignore[return-value]  # binary modes only
    return open(path, mode)


def write_idx(path: str | os.PathLike[str], array: np.ndarray) -> Path:
    """Write a uint8 array (1-D labels or 3-D images) as an IDX file; a ``.gz`` name is gzipped.

    >>> import tempfile
    >>> path = write_idx(Path(tempfile.mkdtemp()) / "labels-idx1-ubyte.gz", np.arange(3, dtype=np.uint8))
    >>> read_idx(path).tolist()
    [0, 1, 2]
    """
    array = np.asarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"write_idx writes unsigned bytes only, got dtype {array.dtype}; pass array.astype(np.uint8)")
    if array.ndim not in (1, 3):
        raise ValueError(f"write_idx expects 1-D labels or 3-D (N, rows, cols) images, got shape {array.shape}")
    path = Path(path)
    header = (0x0800 | array.ndim).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with _open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array).tobytes())
    return path


def read_idx(path: str | os.PathLike[str], expected_magic: int | None = None) -> np.ndarray:
    """Read an unsigned-byte IDX file (plain or ``.gz``) into a uint8 array of its stated shape.

    >>> import tempfile
    >>> path = write_idx(Path(tempfile.mkdtemp()) / "images-idx3-ubyte", np.zeros((2, 4, 4), np.uint8))
    >>> read_idx(path, expected_magic=IMAGES_MAGIC).shape
    (2, 4, 4)
    """
    path = Path(path)
    try:
        with _open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"cannot read IDX file {path}: {err}; the file is corrupt, replace it") from err
    magic = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if magic is None or magic >> 8 != 0x08 or (expected_magic is not None and magic != expected_magic):
        want = f"0x{expected_magic:08X}" if expected_magic is not None else "0x000008NN (unsigned bytes)"
        got = "none (file shorter than 4 bytes)" if magic is None else f"0x{magic:08X}"
        raise ValueError(
            f"{path} is not a valid IDX file: magic number {got}, expected {want}; the file is corrupt "
            "or is not the MNIST file of that name, replace it with the original"
        )
    ndim = magic & 0xFF
    header_len = 4 + 4 * ndim
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected_len = header_len + int(np.prod(shape, dtype=np.int64))
    if len(raw) != expected_len:
        raise ValueError(
            f"{path} has {len(raw)} bytes but its header {shape} needs {expected_len}; the file is "
            "truncated or corrupt, replace it with the original"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(shape)


def find_mnist_file(data_dir: Path, name: str) -> Path | None:
    """The first of ``name``, ``name.gz``, ``raw/name``, ``raw/name.gz`` under ``data_dir``."""
    for folder in (data_dir, data_dir / "raw"):  # raw/ is torchvision's layout
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _missing_files_error(data_dir: Path, missing: list[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"MNIST files not found in {data_dir} (nor in its raw/ subfolder): missing {', '.join(missing)}. "
        f"MNISTDataModule expects the four files {', '.join(EXPECTED_FILES)}, each plain or gzipped (.gz). "
        "trainmesh cannot download them (it never uses the network): place the files in that "
        "directory, or pass data_dir= pointing to where they are"
    )


def load_mnist_split(
    data_dir: Path, images_name: str, labels_name: str, *, normalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 (N, 1, rows, cols) in [0, 1] (then standardized if ``normalize``), labels int64."""
    images_path = find_mnist_file(data_dir, images_name)
    labels_path = find_mnist_file(data_dir, labels_name)
    if images_path is None or labels_path is None:
        missing = [name for name, path in ((images_name, images_path), (labels_name, labels_path)) if path is None]
        raise _missing_files_error(data_dir, missing)
    images = read_idx(images_path, expected_magic=IMAGES_MAGIC)
    labels = read_idx(labels_path, expected_magic=LABELS_MAGIC)
    if len(images) != len(labels):
        raise ValueError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} "
            "labels; the two files come from different sets or one is truncated, replace them"
        )
    inputs = torch.from_numpy(images.copy()).unsqueeze(1).float().div_(255.0)  # copy: frombuffer is read-only
    if normalize:
        inputs.sub_(MNIST_MEAN).div_(MNIST_STD)
    return inputs, torch.from_numpy(labels.astype(np.int64))


class MNISTDataModule(DataModule):
    """MNIST read from IDX files in ``data_dir``: a seeded train/val split of the 60000 train images,
    and the 10000 ``t10k`` images as the test (and predict) set.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for name, n in ((TRAIN_IMAGES, 30), (TEST_IMAGES, 10)):
    ...     _ = write_idx(root / name, np.zeros((n, 28, 28), np.uint8))
    ...     _ = write_idx(root / name.replace("images-idx3", "labels-idx1"), np.zeros(n, np.uint8))
    >>> dm = MNISTDataModule(root, batch_size=8, val_size=10)
    >>> dm.setup("fit")
    >>> len(dm.train_set), len(dm.val_set)
    (20, 10)
    >>> tuple(next(iter(dm.train_dataloader()))[0].shape)
    (8, 1, 28, 28)
    """

    dims = (1, 28, 28)
    num_features = 28 * 28
    num_classes = 10

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = "./data/MNIST",
        batch_size: int = 32,
        num_workers: int = 0,
        val_size: int = 5000,
        seed: int = 0,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}; pass e.g. batch_size=32")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        if not isinstance(val_size, int) or val_size < 0:
            raise ValueError(f"val_size must be an integer >= 0, got {val_size!r}; it counts held-out train images")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        # Absolute, so that error messages name the directory whatever the working directory.
        self.data_dir = Path(data_dir).expanduser().absolute()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.val_size = val_size
        self.seed = seed
        self.normalize = normalize
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None
        self.test_set: TensorDataset | None = None

    def prepare_data(self) -> None:
        # Nothing to download; fail here, once and early, rather than in every process's setup.
        missing = [name for name in EXPECTED_FILES if find_mnist_file(self.data_dir, name) is None]
        if missing:
            raise _missing_files_error(self.data_dir, missing)

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", "validate", None) and self.train_set is None:
            inputs, targets = load_mnist_split(self.data_dir, TRAIN_IMAGES, TRAIN_LABELS, normalize=self.normalize)
            if self.val_size >= len(inputs):
                raise ValueError(
                    f"val_size={self.val_size} leaves no training images: the train file holds only "
                    f"{len(inputs)}; pass a smaller val_size"
                )
            # A private generator: the split depends on `seed` alone, identical in every process.
            order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(self.seed))
            val_idx, train_idx = order[: self.val_size], order[self.val_size :]
            self.train_set = TensorDataset(inputs[train_idx], targets[train_idx])
            self.val_set = TensorDataset(inputs[val_idx], targets[val_idx])
        if stage in ("test", "predict", None) and self.test_set is None:
            self.test_set = TensorDataset(
                *load_mnist_split(self.data_dir, TEST_IMAGES, TEST_LABELS, normalize=self.normalize)
            )

    def _require(self, dataset: TensorDataset | None, loader: str, stage: str) -> TensorDataset:
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__}.{loader}() was called before setup('{stage}'); call it first "
                "(the Trainer does this for you)"
            )
        return dataset

    def _loader(self, dataset: TensorDataset | torch.Tensor, *, shuffle: bool) -> DataLoader:
        # predict passes a tensor: its rows serve as a map-style dataset
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)  # type: ignore[arg-type]

    def train_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.train_set, "train_dataloader", "fit"), shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.val_set, "val_dataloader", "validate"), shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._require(self.test_set, "test_dataloader", "test"), shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        # A bare tensor is a valid map-style dataset, so batches are image tensors, not 1-tuples.
        inputs = self._require(self.test_set, "predict_dataloader", "predict").tensors[0]
        return self._loader(inputs, shuffle=False)
