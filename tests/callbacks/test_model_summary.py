import logging
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from trainmesh.callbacks.model_summary import (
    ModelSummary,
    RichModelSummary,
    format_summary,
    human_readable_count,
    summarize,
)
from trainmesh.utilities.model_summary import table as summary_table


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)


def test_counts_on_known_model():
    table = summarize(TwoLayers())
    assert [(r.index, r.name, r.type_name, r.params) for r in table.rows] == [
        (0, "encoder", "Sequential", 8320),
        (1, "head", "Linear", 1290),
    ]
    assert (table.trainable, table.non_trainable, table.total) == (9610, 0, 9610)
    assert table.size_mb == pytest.approx(9610 * 4 / 1e6)
    assert tuple(table.rows[1])[:4] == (1, "head", "Linear", 1290)  # rows are plain tuples too


def test_max_depth():
    model = TwoLayers()
    assert [r.name for r in summarize(model, max_depth=2).rows] == ["encoder", "encoder.0", "encoder.1", "head"]
    assert [r.name for r in summarize(model, max_depth=-1).rows] == ["encoder", "encoder.0", "encoder.1", "head"]
    assert summarize(model, max_depth=0).rows == []
    with pytest.raises(ValueError, match="max_depth"):
        summarize(model, max_depth=-2)


def test_frozen_params_and_dtype_size():
    model = TwoLayers().to(torch.float16)
    model.encoder.requires_grad_(False)
    table = summarize(model)
    assert (table.trainable, table.non_trainable) == (1290, 8320)
    assert table.size_mb == pytest.approx(9610 * 2 / 1e6)


def test_shared_parameters_count_once():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.out = nn.Linear(16, 100, bias=False)
            self.out.weight = self.embed.weight
            self.again = self.embed  # the same module under two names

    table = summarize(Tied())
    assert table.total == 1600
    assert table.size_mb == pytest.approx(1600 * 4 / 1e6)
    assert [(r.name, r.params) for r in table.rows] == [("embed", 1600), ("out", 1600)]


def test_meta_and_uninitialized_parameters():
    with torch.device("meta"):
        big = nn.Linear(1000, 1000)
    table = summarize(big, max_depth=1)
    assert table.total == 1_001_000 and not table.has_uninitialized

    lazy = nn.Sequential(nn.LazyLinear(8), nn.Linear(8, 2))
    summary_table._WARNINGS.clear()
    with pytest.warns(
        UserWarning, match="may be inaccurate because the model contains an instance of `UninitializedParameter`"
    ):
        table = summarize(lazy)
    assert table.has_uninitialized
    assert table.total == 18 and [r.params for r in table.rows] == [0, 18]
    assert "initialized" not in format_summary(table)  # Lightning's table says nothing of it: its warning does


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0"),
        (999, "999"),
        (1_000, "1.0 K"),
        (1_290, "1.3 K"),
        (8_320, "8.3 K"),
        (99_949, "99.9 K"),
        (100_000, "100 K"),
        (2_100_000, "2.1 M"),
        (1_200_000_000, "1.2 B"),
        (3_000_000_000_000, "3.0 T"),
        (5_000_000_000_000_000, "5,000 T"),
    ],
)
def test_human_readable_count(count, text):
    assert human_readable_count(count) == text


def test_format_summary_table():
    """Lightning 2.6's layout (tests/callbacks/test_model_summary_as_lightning.py compares the text)."""
    text = format_summary(summarize(TwoLayers()))
    lines = text.splitlines()
    assert lines[0].split("|")[1:] == [" Name    ", " Type       ", " Params ", " Mode  ", " FLOPs"]
    assert lines[2] == "0 | encoder | Sequential | 8.3 K  | train | 0    "
    assert lines[3] == "1 | head    | Linear     | 1.3 K  | train | 0    "
    assert set(lines[1]) == {"-"} and lines[4] == lines[1]
    assert lines[5:] == [
        "9.6 K     Trainable params",
        "0         Non-trainable params",
        "9.6 K     Total params",
        "0.038     Total estimated model params size (MB)",
        "4         Modules in train mode",
        "0         Modules in eval mode",
        "0         Total Flops",
    ]


def test_callback_logs_on_rank_zero_only_and_the_rich_name_prints(caplog, capsys):
    # Lightning's ModelSummary logs the table (stderr), its RichModelSummary renders it on stdout
    module = TwoLayers()
    with caplog.at_level(logging.INFO, logger="trainmesh"):
        ModelSummary().on_fit_start(SimpleNamespace(is_global_zero=True), module)
        assert "Total params" in caplog.text
        caplog.clear()
        ModelSummary().on_fit_start(SimpleNamespace(is_global_zero=False), module)
        ModelSummary(max_depth=0).on_fit_start(SimpleNamespace(is_global_zero=True), module)
        assert caplog.text == ""
        assert capsys.readouterr().out == ""
        RichModelSummary().on_fit_start(SimpleNamespace(is_global_zero=True), module)
        assert "Total params" in capsys.readouterr().out and caplog.text == ""
    with pytest.raises(ValueError, match="max_depth"):
        ModelSummary(max_depth=-5)
