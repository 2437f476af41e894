"""Lightning's ``utilities`` names, each compared with Lightning's own function on the same input."""

import pickle
import threading

import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning.pytorch")

import lightning.pytorch.utilities as lu  # noqa: E402
import lightning.pytorch.utilities.memory as lmemory  # noqa: E402
import lightning.pytorch.utilities.parsing as lparsing  # noqa: E402
import lightning.pytorch.utilities.rank_zero as lrank_zero  # noqa: E402

import trainmesh as tm  # noqa: E402
import trainmesh.utilities as tu  # noqa: E402
from trainmesh.utilities import memory, parsing, rank_zero  # noqa: E402


def _tied() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)))
    model[2][1].weight = model[0].weight
    return model


@pytest.mark.parametrize("norm_type", [1, 2.0, "inf", 3])
def test_grad_norm_names_and_values_are_lightnings(norm_type):
    model = _tied()
    model(torch.randn(4, 3)).pow(2).sum().backward()
    model[2][0].bias.grad = None  # a parameter without a gradient is left out
    ours, theirs = tu.grad_norm(model, norm_type), lu.grad_norm(model, norm_type)
    assert list(ours) == list(theirs)
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], rtol=1e-6, atol=0)
    for bad in (0, -1):  # Lightning's own test_grads.py matches its words
        with pytest.raises(ValueError) as theirs_error:
            lu.grad_norm(model, bad)
        with pytest.raises(ValueError) as ours_error:
            tu.grad_norm(model, bad)
        assert str(ours_error.value) == str(theirs_error.value)


def test_shared_parameters_are_found_and_set_again_as_lightning_does():
    model = _tied()
    assert tu.find_shared_parameters(model) == lu.find_shared_parameters(model) == [["0.weight", "2.1.weight"]]
    copy = pickle.loads(pickle.dumps(model))
    copy[2][1].weight = nn.Parameter(copy[2][1].weight.detach().clone())  # untied
    tu.set_shared_parameters(copy, tu.find_shared_parameters(model))
    assert copy[2][1].weight is copy[0].weight


def test_enums_compare_and_parse_as_lightnings():
    for text in ("norm", "NORM", "value", "Value"):
        ours, theirs = tu.GradClipAlgorithmType.from_str(text, "any"), lu.GradClipAlgorithmType.from_str(text, "any")
        assert ours.value == theirs.value and (ours == text) == (theirs == text)
        assert hash(ours) == hash(theirs)
    assert tu.GradClipAlgorithmType.supported_types() == lu.GradClipAlgorithmType.supported_types()
    assert str(tu.GradClipAlgorithmType.NORM) == str(lu.GradClipAlgorithmType.NORM).replace("lightning.", "")


def test_measure_flops_counts_what_lightning_counts():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    for loss in (None, lambda y: y.sum()):
        assert tu.measure_flops(model, lambda: model(x), loss) == lu.measure_flops(model, lambda: model(x), loss)


def test_suggested_workers_and_small_helpers_match_lightnings():
    for size in (1, 2, 3):
        assert tu.suggested_max_num_workers(size) == lu.suggested_max_num_workers(size)
    with pytest.raises(ValueError):
        tu.suggested_max_num_workers(0)
    for obj in (1, {"a": 2}, threading.Lock(), lambda: 0):
        assert tu.is_picklable(obj) == lu.is_picklable(obj)
    batch = {"x": torch.ones(2, requires_grad=True) * 2, "n": [torch.zeros(1, requires_grad=True) + 1]}
    ours, theirs = memory.recursive_detach(batch, to_cpu=True), lmemory.recursive_detach(batch, to_cpu=True)
    assert not ours["x"].requires_grad and not ours["n"][0].requires_grad
    assert torch.equal(ours["x"], theirs["x"]) and type(ours["n"]) is type(theirs["n"])


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2 GiB",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
        "[enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 1",
        "something else",
    ],
)
def test_out_of_memory_errors_are_recognised_as_lightning_recognises_them(message):
    for error in (RuntimeError(message), RuntimeError(message, 2), ValueError(message)):
        assert memory.is_oom_error(error) == lmemory.is_oom_error(error)
        assert memory.is_cuda_out_of_memory(error) == lmemory.is_cuda_out_of_memory(error)
        assert memory.is_cudnn_snafu(error) == lmemory.is_cudnn_snafu(error)
        assert memory.is_out_of_cpu_memory(error) == lmemory.is_out_of_cpu_memory(error)
    memory.garbage_collection_cuda()  # no CUDA here: collects and returns


class _Base:
    def __init__(self, a, b=2, *rest, **extra):
        self.frames = parsing.collect_init_args(_frame(), [])
        self.lightning_frames = lparsing.collect_init_args(_frame(), [])


class _Child(_Base):
    def __init__(self, c, **kwargs):
        super().__init__(c * 10, **kwargs)


def _frame():
    import inspect

    return inspect.currentframe().f_back  # the __init__ that called us


def test_init_argument_parsing_matches_lightnings():
    assert parsing.parse_class_init_keys(_Base) == lparsing.parse_class_init_keys(_Base) == ("self", "rest", "extra")
    made = _Child(3, b=5, flag=True)
    assert made.frames == made.lightning_frames
    # _Base.__init__ has no __class__ cell (it calls no super()), so only _Child's frame counts.
    assert made.frames == [{"c": 3, "b": 5, "flag": True}]
    hparams = {"ok": 1, "lock": threading.Lock()}
    theirs = dict(hparams)
    with pytest.warns(UserWarning, match="lock"):
        parsing.clean_namespace(hparams)
    with pytest.warns(UserWarning):
        lparsing.clean_namespace(theirs)
    assert hparams.keys() == theirs.keys() == {"ok"}


def test_lightning_getattr_and_setattr_search_the_module_and_its_hparams():
    class Model(tm.Module):
        def __init__(self, learning_rate=0.1):
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(2, 2)

    model = Model()
    assert parsing.lightning_hasattr(model, "learning_rate") and not parsing.lightning_hasattr(model, "nope")
    parsing.lightning_setattr(model, "learning_rate", 0.5)
    assert parsing.lightning_getattr(model, "learning_rate") == 0.5 == model.hparams.learning_rate
    import lightning.pytorch as pl

    for name in ("lightning_getattr", "lightning_setattr"):  # Lightning's words: its test_parsing.py matches them
        args = () if name == "lightning_getattr" else (1,)
        with pytest.raises(AttributeError) as theirs:
            getattr(lparsing, name)(pl.LightningModule(), "nope", *args)
        with pytest.raises(AttributeError) as ours:
            getattr(parsing, name)(model, "nope", *args)
        assert str(ours.value) == str(theirs.value)
    model.layer_width = 2
    parsing.lightning_setattr(model, "layer_width", 3)
    assert model.layer_width == 3


def test_rank_zero_helpers_as_lightnings():
    assert rank_zero.rank_prefixed_message("hi", 3) == lrank_zero.rank_prefixed_message("hi", 3)
    assert rank_zero.rank_prefixed_message("hi", None) == lrank_zero.rank_prefixed_message("hi", None)
    assert issubclass(rank_zero.LightningDeprecationWarning, DeprecationWarning)
    cache = rank_zero.WarningCache()
    with pytest.warns(UserWarning, match="once") as caught:
        cache.warn("once")
        cache.warn("once")
    assert len(caught) == 1


def test_every_name_lightnings_utilities_exports_is_importable_here():
    missing = [n for n in lu.__all__ if not hasattr(tu, n)]
    assert set(missing) <= {"CombinedLoader", "is_shared_filesystem"}, missing


def test_isolate_rng_restores_what_lightnings_restores():
    import random

    import numpy as np
    from lightning.pytorch.utilities.seed import isolate_rng as lightning_isolate_rng

    from trainmesh.utilities.seed import isolate_rng

    for isolate in (isolate_rng, lightning_isolate_rng):
        torch.manual_seed(1), random.seed(1), np.random.seed(1)
        with isolate(include_cuda=False):
            torch.rand(3), random.random(), np.random.rand()
        assert (torch.rand(1).item(), random.random(), np.random.rand()) == _draws_after_seed(1)


def _draws_after_seed(seed):
    import random

    import numpy as np

    torch.manual_seed(seed), random.seed(seed), np.random.seed(seed)
    return torch.rand(1).item(), random.random(), np.random.rand()


def test_possible_user_warnings_can_be_switched_off():
    import warnings

    from trainmesh.utilities.warnings import PossibleUserWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tu.disable_possible_user_warnings()
        warnings.warn("few workers", PossibleUserWarning, stacklevel=1)
        warnings.warn("kept", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["kept"]


def test_the_optimizer_config_types_annotate_a_configure_optimizers():
    from trainmesh.utilities.types import LRSchedulerConfig, OptimizerLRSchedulerConfig

    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    config: OptimizerLRSchedulerConfig = {"optimizer": optimizer, "lr_scheduler": scheduler}
    assert config["lr_scheduler"] is LRSchedulerConfig(scheduler).scheduler
