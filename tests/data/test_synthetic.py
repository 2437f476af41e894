import pytest
import torch

from trainmesh.data.synthetic import SyntheticDataModule, make_classification_tensors


def test_make_classification_tensors_shapes_dtypes_and_determinism():
    torch.manual_seed(1)
    x, y = make_classification_tensors(100, 12, 5, seed=3)
    torch.manual_seed(2)  # the global RNG must not matter
    x2, y2 = make_classification_tensors(100, 12, 5, seed=3)
    assert x.shape == (100, 12) and x.dtype == torch.float32
    assert y.shape == (100,) and y.dtype == torch.int64 and 0 <= y.min() and y.max() < 5
    assert torch.equal(x, x2) and torch.equal(y, y2)
    x3, y3 = make_classification_tensors(100, 12, 5, seed=4)
    assert not torch.equal(x, x3)


def test_global_rng_is_untouched():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    make_classification_tensors(10, 4, 3, seed=9)
    SyntheticDataModule(num_samples=16, num_features=4).setup("fit")
    assert torch.equal(torch.rand(3), expected)


def test_labels_are_learnable_by_a_linear_model():
    x, y = make_classification_tensors(512, 8, 4, seed=0)
    assert len(torch.unique(y)) == 4  # every class appears
    # Least squares on one-hot targets recovers the teacher's decision well above chance (25%).
    weights = torch.linalg.lstsq(x, torch.nn.functional.one_hot(y, 4).float()).solution
    assert ((x @ weights).argmax(1) == y).float().mean() > 0.7


def test_module_splits_shapes_and_train_equals_function():
    dm = SyntheticDataModule(num_samples=64, num_features=8, num_classes=3, batch_size=16, seed=5)
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (64, 16, 16)
    x, y = make_classification_tensors(64, 8, 3, seed=5)
    assert torch.equal(dm.train_set.tensors[0], x) and torch.equal(dm.train_set.tensors[1], y)
    assert not torch.equal(dm.val_set.tensors[0], dm.test_set.tensors[0])
    batches = list(dm.train_dataloader())
    assert len(batches) == 4 and batches[0][0].shape == (16, 8) and batches[0][1].shape == (16,)
    assert torch.equal(batches[0][0], x[:16])  # shuffle=False keeps the order
    predict = next(iter(dm.predict_dataloader()))
    assert isinstance(predict, torch.Tensor) and torch.equal(predict, dm.test_set.tensors[0][:16])
    assert len(list(dm.val_dataloader())) == 1 and len(list(dm.test_dataloader())) == 1


def test_module_is_deterministic_and_shuffle_flag():
    a = SyntheticDataModule(num_samples=32, num_features=4, seed=1)
    b = SyntheticDataModule(num_samples=32, num_features=4, seed=1, shuffle=True)
    a.setup("fit")
    b.setup("fit")
    for ds_a, ds_b in zip((a.train_set, a.val_set, a.test_set), (b.train_set, b.val_set, b.test_set)):
        assert all(torch.equal(t_a, t_b) for t_a, t_b in zip(ds_a.tensors, ds_b.tensors))
    assert isinstance(a.train_dataloader().sampler, torch.utils.data.SequentialSampler)
    assert isinstance(b.train_dataloader().sampler, torch.utils.data.RandomSampler)


def test_defaults_build_quickly_with_expected_sizes():
    dm = SyntheticDataModule()
    dm.setup("fit")
    assert dm.train_set.tensors[0].shape == (4096, 784)
    assert len(dm.train_dataloader()) == 4096 // 16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_samples": 0}, "num_samples"),
        ({"num_classes": 1}, "num_classes"),
        ({"batch_size": 0}, "batch_size"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticDataModule(**kwargs)
