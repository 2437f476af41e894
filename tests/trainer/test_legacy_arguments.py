"""The seeds' Lightning 1.x Trainer spellings map to today's, each with a one-line notice."""

import pytest
import torch

import trainmesh as tm
from trainmesh.trainer.lightning1.legacy_arguments import LegacyArgumentNotice


def quiet(**kwargs):
    return tm.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False, **kwargs)


@pytest.mark.parametrize("old", ["dp", "ddp", "ddp2", "ddp_spawn"])
def test_accelerator_holding_a_strategy_name(old):
    with pytest.warns(LegacyArgumentNotice, match=f"today: strategy='{old}'"):
        trainer = quiet(accelerator=old, devices=2 if old == "dp" else 1)
    assert trainer.strategy.name == {"ddp_spawn": "ddp"}.get(old, old)
    assert trainer.runtime.device_type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_distributed_backend_is_the_strategy():
    with pytest.warns(LegacyArgumentNotice, match="today: strategy='dp'"):
        trainer = quiet(distributed_backend="dp", devices=2, accelerator="cpu")
    assert trainer.strategy.name == "dp"


def test_weights_summary_none_turns_the_summary_off():
    with pytest.warns(LegacyArgumentNotice, match="today: enable_model_summary=False"):
        trainer = quiet(weights_summary=None)
    assert not any(type(cb).__name__ == "ModelSummary" for cb in trainer.callbacks)


def test_gpus_without_cuda_says_so_and_how_to_run_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(
        ValueError, match=r"gpus=2 asks for CUDA devices, but no CUDA device is visible.*accelerator='cpu', devices=2"
    ):
        quiet(gpus=2)


@pytest.mark.cuda
def test_gpus_means_cuda_devices():
    with pytest.warns(LegacyArgumentNotice, match="today: accelerator='cuda', devices=1"):
        trainer = quiet(gpus=1)
    assert trainer.runtime.device_type == "cuda"


def test_num_tpu_cores_is_a_clear_error():
    with pytest.raises(ValueError, match="num_tpu_cores=8 asks for TPU cores, which need torch_xla"):
        quiet(num_tpu_cores=8)


def test_todays_spelling_prints_no_notice(recwarn):
    quiet(accelerator="cpu", devices=1, strategy="auto")
    assert not [w for w in recwarn if issubclass(w.category, LegacyArgumentNotice)]


@pytest.mark.parametrize("gpus", [0, []])
def test_gpus_zero_means_cpu_and_the_notice_says_so(gpus):
    # Lightning 1.x ran gpus=0 (and gpus=[]) on the CPU: the notice names what really runs.
    with pytest.warns(LegacyArgumentNotice, match=r"today: accelerator='cpu', devices=1$") as notices:
        trainer = quiet(gpus=gpus)
    assert not any("cuda" in str(notice.message) for notice in notices)
    assert trainer.runtime.device_type == "cpu" and trainer.strategy.root_device.type == "cpu"
    assert trainer.world_size == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
@pytest.mark.parametrize(
    "gpus, devices", [("0,1", "devices=2"), ("2", "devices=2"), ("-1", "devices=1"), (-1, "devices=1")]
)
def test_gpus_as_lightning_1x_strings_are_read_and_without_cuda_say_how_to_run_on_cpu(gpus, devices):
    with pytest.raises(ValueError, match=rf"gpus={gpus!r} asks for CUDA devices.*accelerator='cpu', {devices}"):
        quiet(gpus=gpus)


def test_gpus_that_name_no_count_or_indices_are_a_clear_error():
    with pytest.raises(ValueError, match=r"gpus='two' is neither a number of GPUs.*devices=\[0, 1\]"):
        quiet(gpus="two")
