import importlib
import sys
from collections import Counter

import pytest
import torch

from trainmesh.data.digits import DigitsDataModule, split_sizes


def _ready(**kwargs) -> DigitsDataModule:
    dm = DigitsDataModule(**kwargs)
    dm.setup("fit")
    return dm


def _row_counts(*pairs) -> Counter:
    return Counter((x.numpy().tobytes(), int(y)) for rows in pairs for x, y in rows)


def _all_inputs(dm: DigitsDataModule) -> list[torch.Tensor]:
    return [dm.train_set.tensors[0], dm.val_set.tensors[0], dm.test_set.tensors[0]]


def test_split_sizes_add_up_and_are_disjoint():
    dm = _ready(seed=0)
    sizes = [len(dm.train_set), len(dm.val_set), len(dm.test_set)]
    assert sizes == [1258, 180, 359]
    assert sum(sizes) == 1797
    # The digits set holds duplicate images, so the splits are compared with the original as
    # multisets of (input, target) rows: each of the 1797 rows must land in exactly one split.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    reference = zip(torch.as_tensor(bunch.data, dtype=torch.float32) / 16, torch.as_tensor(bunch.target))
    splits = [zip(*ds.tensors) for ds in (dm.train_set, dm.val_set, dm.test_set)]
    assert _row_counts(*splits) == _row_counts(reference)


def test_split_is_deterministic_per_seed_and_independent_of_global_rng():
    torch.manual_seed(1)
    a = _ready(seed=3)
    torch.manual_seed(2)
    b = _ready(seed=3)
    c = _ready(seed=4)
    for xa, xb in zip(_all_inputs(a), _all_inputs(b)):
        assert torch.equal(xa, xb)
    assert not torch.equal(a.train_set.tensors[0], c.train_set.tensors[0])
    assert not torch.equal(a.test_set.tensors[1], c.test_set.tensors[1])


def test_values_dtypes_and_shapes():
    dm = _ready(seed=0)
    for x in _all_inputs(dm):
        assert x.dtype == torch.float32 and x.shape[1] == dm.num_features == 64
        assert x.min() >= 0.0 and x.max() <= 1.0
    assert dm.train_set.tensors[0].max() == 1.0
    for ds in (dm.train_set, dm.val_set, dm.test_set):
        y = ds.tensors[1]
        assert y.dtype == torch.int64 and 0 <= y.min() and y.max() < dm.num_classes == 10


def test_loaders_shuffle_train_only_and_predict_yields_inputs():
    dm = _ready(batch_size=100)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (100, 64) and y.shape == (100,)
    assert isinstance(dm.train_dataloader().sampler, torch.utils.data.RandomSampler)
    for loader in (dm.val_dataloader(), dm.test_dataloader(), dm.predict_dataloader()):
        assert isinstance(loader.sampler, torch.utils.data.SequentialSampler)
    first_test_x, _ = next(iter(dm.test_dataloader()))
    first_predict = next(iter(dm.predict_dataloader()))
    assert isinstance(first_predict, torch.Tensor)
    assert torch.equal(first_predict, first_test_x)


def test_custom_fractions_and_repeated_setup_keeps_split():
    dm = _ready(val_fraction=0.0, test_fraction=0.5)
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == split_sizes(1797, 0.0, 0.5)
    train = dm.train_set
    dm.setup("test")
    assert dm.train_set is train


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"val_fraction": 0.6, "test_fraction": 0.4}, "below 1"),
        ({"test_fraction": -0.1}, "test_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_workers": -1}, "num_workers"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DigitsDataModule(**kwargs)


def test_loader_before_setup_says_call_setup():
    with pytest.raises(RuntimeError, match="setup"):
        DigitsDataModule().train_dataloader()


def test_importing_trainmesh_data_does_not_import_sklearn(monkeypatch):
    # In-process (a subprocess would spend most of the time budget importing torch): a None
    # entry in sys.modules makes `import sklearn` fail, then trainmesh.data is imported afresh.
    # monkeypatch puts every sys.modules entry back afterwards, so other tests keep their classes.
    original = importlib.import_module("trainmesh.data")
    # The fresh import rebinds the package attribute too; record it so that it is restored.
    monkeypatch.setattr(sys.modules["trainmesh"], "data", original)
    stale = ("sklearn", "trainmesh.data")
    for name in [n for n in sys.modules if n in stale or n.startswith(tuple(f"{s}." for s in stale))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    fresh = importlib.import_module("trainmesh.data")
    assert fresh is not original
    assert fresh.DigitsDataModule(batch_size=8).num_classes == 10


def test_setup_reads_the_digits_without_importing_sklearn(monkeypatch):
    """The data are sklearn's load_digits(), read without importing scikit-learn (with scipy,
    1.2 s of CPU in every process that sets the data module up: each worker of a run)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    for name in [n for n in sys.modules if n.startswith(("sklearn.", "scipy"))]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of sklearn.datasets or scipy now fails
    dm = _ready(seed=0, val_fraction=0.0, test_fraction=0.0)
    order = torch.randperm(1797, generator=torch.Generator().manual_seed(0))
    assert torch.equal(dm.train_set.tensors[0], (torch.as_tensor(bunch.data, dtype=torch.float32) / 16.0)[order])
    assert torch.equal(dm.train_set.tensors[1], torch.as_tensor(bunch.target)[order])
