import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from trainmesh.data.mnist import (
    EXPECTED_FILES,
    IMAGES_MAGIC,
    MNIST_MEAN,
    MNIST_STD,
    TEST_IMAGES,
    TEST_LABELS,
    TRAIN_IMAGES,
    TRAIN_LABELS,
    MNISTDataModule,
    read_idx,
    write_idx,
)

NUM_TRAIN, NUM_TEST = 50, 20


def _fake_mnist(
    root: Path, *, gz: bool = False, subfolder: str = "", num_train: int = NUM_TRAIN, num_test: int = NUM_TEST
) -> dict[str, np.ndarray]:
    """Random uint8 images with a known 0 and 255 pixel, labels 0..9; returns what was written."""
    rng = np.random.RandomState(0)
    folder = root / subfolder
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        TRAIN_IMAGES: rng.randint(0, 256, size=(num_train, 28, 28)).astype(np.uint8),
        TRAIN_LABELS: (np.arange(num_train) % 10).astype(np.uint8),
        TEST_IMAGES: rng.randint(0, 256, size=(num_test, 28, 28)).astype(np.uint8),
        TEST_LABELS: (np.arange(num_test) % 10).astype(np.uint8),
    }
    arrays[TRAIN_IMAGES][0, 0, 0], arrays[TRAIN_IMAGES][0, 0, 1] = 0, 255
    for name, array in arrays.items():
        write_idx(folder / (name + (".gz" if gz else "")), array)
    return arrays


@pytest.mark.parametrize("gz, subfolder", [(False, ""), (True, ""), (False, "raw"), (True, "raw")])
def test_reads_plain_gz_and_raw_layouts(tmp_path, gz, subfolder):
    arrays = _fake_mnist(tmp_path, gz=gz, subfolder=subfolder)
    dm = MNISTDataModule(tmp_path, batch_size=8, val_size=10, normalize=False)
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (40, 10, NUM_TEST)
    x, y = dm.test_set.tensors
    assert x.shape == (NUM_TEST, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64
    # Test set keeps file order, so it can be compared element by element.
    torch.testing.assert_close(x, torch.from_numpy(arrays[TEST_IMAGES]).float()[:, None] / 255)
    assert y.tolist() == arrays[TEST_LABELS].tolist()
    train_x = torch.cat([dm.train_set.tensors[0], dm.val_set.tensors[0]])
    assert train_x.min() == 0.0 and train_x.max() == 1.0


def test_normalization_uses_mnist_mean_and_std(tmp_path):
    _fake_mnist(tmp_path)
    raw = MNISTDataModule(tmp_path, val_size=0, normalize=False)
    norm = MNISTDataModule(tmp_path, val_size=0, normalize=True)
    raw.setup(None)
    norm.setup(None)
    expected = (raw.test_set.tensors[0] - MNIST_MEAN) / MNIST_STD
    torch.testing.assert_close(norm.test_set.tensors[0], expected)
    assert norm.train_set.tensors[0].min().item() == pytest.approx(-MNIST_MEAN / MNIST_STD)
    assert norm.train_set.tensors[0].max().item() == pytest.approx((1 - MNIST_MEAN) / MNIST_STD)


def test_split_is_disjoint_and_seeded(tmp_path):
    arrays = _fake_mnist(tmp_path)

    def split(seed: int) -> tuple[list[int], list[int]]:
        dm = MNISTDataModule(tmp_path, val_size=10, seed=seed, normalize=False)
        dm.setup("fit")
        # Images are random, so each image identifies its row in the file.
        rows = {arrays[TRAIN_IMAGES][i].tobytes(): i for i in range(NUM_TRAIN)}

        def indices(ds):
            return [rows[(img[0] * 255).round().to(torch.uint8).numpy().tobytes()] for img in ds.tensors[0]]

        return indices(dm.train_set), indices(dm.val_set)

    train, val = split(0)
    assert sorted(train + val) == list(range(NUM_TRAIN))
    assert split(0) == (train, val)
    assert split(1)[1] != val


def test_loaders(tmp_path):
    _fake_mnist(tmp_path)
    dm = MNISTDataModule(tmp_path, batch_size=16, val_size=10)
    dm.setup("fit")
    dm.setup("predict")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 1, 28, 28) and y.shape == (16,)
    assert isinstance(dm.train_dataloader().sampler, torch.utils.data.RandomSampler)
    assert isinstance(dm.val_dataloader().sampler, torch.utils.data.SequentialSampler)
    predict = next(iter(dm.predict_dataloader()))
    assert isinstance(predict, torch.Tensor)
    assert torch.equal(predict, next(iter(dm.test_dataloader()))[0])


def test_missing_files_message_names_files_directory_and_no_download(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dm = MNISTDataModule("empty")  # relative: the message must still give the absolute path
    for call in (dm.prepare_data, lambda: dm.setup("fit"), lambda: dm.setup("test")):
        with pytest.raises(FileNotFoundError) as info:
            call()
        message = str(info.value)
        for name in EXPECTED_FILES:
            assert name in message
        assert str(tmp_path / "empty") in message
        assert "download" in message and ".gz" in message


def test_one_missing_file_is_named(tmp_path):
    _fake_mnist(tmp_path)
    (tmp_path / TEST_LABELS).unlink()
    with pytest.raises(FileNotFoundError, match=f"missing {TEST_LABELS}"):
        MNISTDataModule(tmp_path).prepare_data()


@pytest.mark.parametrize("gz", [False, True])
def test_bad_magic_names_the_file(tmp_path, gz):
    _fake_mnist(tmp_path, gz=gz, num_train=20)
    name = TRAIN_LABELS + (".gz" if gz else "")
    # Images magic in a labels file: a valid IDX file, but not the one expected.
    write_idx(tmp_path / name, np.zeros((20, 1, 1), np.uint8))
    with pytest.raises(ValueError, match=f"{name}.*magic number 0x00000803, expected 0x00000801"):
        MNISTDataModule(tmp_path, val_size=5).setup("fit")


def test_garbage_and_truncated_files_raise_value_error(tmp_path):
    _fake_mnist(tmp_path, num_train=20)
    (tmp_path / TRAIN_IMAGES).write_bytes(b"\x1f\x8bnot an idx file at all")
    with pytest.raises(ValueError, match=TRAIN_IMAGES):
        MNISTDataModule(tmp_path, val_size=5).setup("fit")
    (tmp_path / TEST_IMAGES).unlink()
    with gzip.open(tmp_path / (TEST_IMAGES + ".gz"), "wb") as f:
        f.write(IMAGES_MAGIC.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (5, 28, 28)) + b"\0" * 10)
    with pytest.raises(ValueError, match="truncated"):
        MNISTDataModule(tmp_path).setup("test")


def test_count_mismatch_raises_value_error(tmp_path):
    _fake_mnist(tmp_path)
    write_idx(tmp_path / TEST_LABELS, np.zeros(NUM_TEST - 1, np.uint8))
    with pytest.raises(ValueError, match=f"{NUM_TEST} images.*{NUM_TEST - 1} labels"):
        MNISTDataModule(tmp_path).setup("test")


def test_val_size_too_large(tmp_path):
    _fake_mnist(tmp_path)
    with pytest.raises(ValueError, match="val_size"):
        MNISTDataModule(tmp_path, val_size=NUM_TRAIN).setup("fit")


def test_write_idx_round_trip_and_rejects_bad_input(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        path = write_idx(tmp_path / name, images)
        np.testing.assert_array_equal(read_idx(path, expected_magic=IMAGES_MAGIC), images)
    assert (tmp_path / "a-idx3-ubyte.gz").read_bytes()[:2] == b"\x1f\x8b"  # really gzipped
    assert (tmp_path / "a-idx3-ubyte").read_bytes()[:8] == bytes([0, 0, 8, 3, 0, 0, 0, 2])
    with pytest.raises(ValueError, match="uint8"):
        write_idx(tmp_path / "b", images.astype(np.int32))
    with pytest.raises(ValueError, match="1-D"):
        write_idx(tmp_path / "b", images[0])
