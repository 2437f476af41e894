"""The summary table's text against Lightning 2.6's (``lightning.pytorch.utilities.model_summary``) for
one small module with an ``example_input_array``: "In sizes" / "Out sizes" from the example's forward,
"Mode", "FLOPs", a layer the forward never reaches ("?"), a tuple input and output, a layer in eval
mode, a parameter of no layer ("other params"), at ``max_depth`` 1, 2 and -1; and what the
``ModelSummary`` callback prints as fit starts."""

import logging
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from trainmesh.callbacks import ModelSummary
from trainmesh.utilities.model_summary import format_summary, summarize

pytest.importorskip("lightning")


class Pair(nn.Module):
    """Takes and gives a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.left, self.right = nn.Linear(4, 6), nn.Linear(4, 2)

    def forward(self, x, y):
        return self.left(x), self.right(y)


def module_class(base: type) -> type:
    class Small(base):
        def __init__(self) -> None:
            super().__init__()
            self.pair = Pair()
            self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
            self.body[2].eval()
            self.unused = nn.Linear(2, 2)
            self.scale = nn.Parameter(torch.ones(3))  # of no layer: Lightning's "other params"
            self.example_input_array = (torch.zeros(5, 4), torch.ones(5, 4))

        def forward(self, x, y):
            left, right = self.pair(x, y)
            return self.body(torch.cat([left, right], dim=1)) * self.scale

    return Small


@pytest.fixture(scope="module")
def modules():
    import lightning.pytorch as pl

    import trainmesh as tm

    torch.manual_seed(0)
    theirs = module_class(pl.LightningModule)()
    torch.manual_seed(0)
    return theirs, module_class(tm.LightningModule)()


@pytest.mark.parametrize("depth", [1, 2, -1])
def test_summary_text_is_lightning_s(modules, depth):
    """Line for line Lightning's text, "In sizes" [[5, 4], [5, 4]] and "Out sizes" [[5, 6], [5, 2]] for
    the pair, "?" for the unused layer (before: no size, mode or FLOPs column, no mode or FLOPs totals)."""
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    theirs, ours = modules
    expected = str(lightning_summarize(theirs, max_depth=depth))
    assert format_summary(summarize(ours, max_depth=depth)) == expected
    assert "In sizes" in expected and "[[5, 4], [5, 4]]" in expected
    # nested rows count their parameters again, so only the top level leaves parameters over
    assert ("other params" in expected) == (depth == 1)


def test_callback_logs_lightning_s_table(modules, caplog):
    """The callback's table at fit start (on rank 0) is Lightning's, with ``max_depth=2``, logged as
    its callback logs it ("\\n" + the table); the module's modes are as before it ran."""
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    theirs, ours = modules
    with caplog.at_level(logging.INFO, logger="trainmesh"):
        ModelSummary(max_depth=2).on_fit_start(SimpleNamespace(is_global_zero=True), ours)
    assert caplog.messages == ["\n" + str(lightning_summarize(theirs, max_depth=2))]
    assert ours.training and not ours.body[2].training
    assert summarize(ours).in_sizes == [[[5, 4], [5, 4]], [5, 8], "?"]


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_a_mixed_precision_fit_warns_of_the_summary_s_size_as_lightning(precision, tmp_path):
    """Lightning's summary warns "Precision bf16-mixed is not supported by the model summary. ..." as fit
    starts with a mixed precision (l-progs7 p02: precision="16-mixed" on the CPU, which runs as bf16-mixed).
    Before: trainmesh printed the table without it."""
    import warnings

    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    import trainmesh as tm

    said = {}
    for framework in (pl, tm):

        class Tiny(framework.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.layer = nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).float().pow(2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        trainer = framework.Trainer(
            accelerator="cpu",
            max_steps=1,
            precision=precision,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            default_root_dir=tmp_path,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(Tiny(), DataLoader(TensorDataset(torch.ones(2, 2))))
        said[framework.__name__] = [str(w.message) for w in caught if "model summary" in str(w.message)]
    assert said["trainmesh"] == said["lightning.pytorch"]
    assert bool(said["trainmesh"]) is (precision == "bf16-mixed")


def test_rich_summary_prints_lightning_s_rich_table(modules, monkeypatch):
    """``RichModelSummary`` draws Lightning's rich table and grid of totals on rich's console (before:
    the plain table printed on stdout); ``header_style`` is passed on as Lightning's."""
    pytest.importorskip("rich")
    import io

    import rich
    from lightning.pytorch.callbacks import RichModelSummary as LightningRich
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize
    from rich.console import Console

    from trainmesh.callbacks import RichModelSummary

    def printed(show) -> str:
        out = io.StringIO()
        monkeypatch.setattr(rich, "get_console", lambda: Console(file=out, width=120, force_terminal=True))
        show()
        return out.getvalue()

    theirs, ours = modules
    summary = lightning_summarize(theirs, max_depth=2)
    data = summary._get_summary_data()
    counts = (summary.total_parameters, summary.trainable_parameters, summary.model_size)
    expected = printed(
        lambda: LightningRich.summarize(
            data, *counts, summary.total_training_modes, summary.total_flops, header_style="bold red"
        )
    )
    trainer = SimpleNamespace(is_global_zero=True)
    got = printed(lambda: RichModelSummary(max_depth=2, header_style="bold red").on_fit_start(trainer, ours))
    assert "Total estimated model params size (MB)" in expected and "┏━━━┳" in expected and "1;31m" in expected
    assert got == expected


def test_rich_summary_without_rich_is_refused_when_made_as_lightning(monkeypatch):
    import importlib.util

    import lightning.pytorch.callbacks.rich_model_summary as their_rich_module

    from trainmesh.callbacks import RichModelSummary

    monkeypatch.setattr(their_rich_module, "_RICH_AVAILABLE", False)
    with pytest.raises(ModuleNotFoundError) as theirs:
        their_rich_module.RichModelSummary()
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rich" else find_spec(name, *a))
    with pytest.raises(ModuleNotFoundError) as ours:
        RichModelSummary()
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("depth", [-2, "temp"])
def test_a_bad_max_depth_raises_lightning_s_words_first(modules, depth):
    """Lightning's test_model_summary.py matches "`max_depth` can be -1, 0 or > 0, got ..." (before:
    trainmesh's own words, and a TypeError for a string)."""
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    from trainmesh.utilities.model_summary import summarize as lightning_named_summarize

    theirs, ours = modules
    with pytest.raises(ValueError) as their_error:
        lightning_summarize(theirs, max_depth=depth)
    with pytest.raises(ValueError) as our_error:
        lightning_named_summarize(ours, max_depth=depth)
    assert str(our_error.value).startswith(str(their_error.value))


def test_the_summary_module_s_constants_are_lightning_s():
    import lightning.pytorch.utilities.model_summary.model_summary as theirs

    import trainmesh.utilities.model_summary.model_summary as ours

    for name in ("UNKNOWN_SIZE", "LEFTOVER_PARAMS_NAME", "NOT_APPLICABLE"):
        assert getattr(ours, name) == getattr(theirs, name)


def test_the_summary_s_training_modes_are_read_when_asked_as_lightning_s(modules):
    """Lightning's ``total_training_modes`` reads the model's modes when asked (before: as they were
    when the summary was made)."""
    from lightning.pytorch.utilities.model_summary import summarize as lightning_summarize

    from trainmesh.utilities.model_summary import summarize as lightning_named_summarize

    counts = []
    for module, summarize_with in zip(modules, (lightning_summarize, lightning_named_summarize)):
        summary = summarize_with(module)
        module.pair.eval()
        counts.append(summary.total_training_modes)
        module.pair.train()
    assert counts[0]["eval"] == 4
    assert counts[1] == counts[0]


@pytest.mark.parametrize("depth", [1, 2, -1])
def test_model_summary_summarize_returns_lightning_s_layers(modules, depth):
    """Lightning's public ``ModelSummary.summarize()``: ``{name: LayerSummary}`` down to ``max_depth``, the
    sizes from the example input run once more, every hook removed (its test_hooks_removed_after_summarize
    reads ``_hook_handle``). Before: AttributeError."""
    from lightning.pytorch.utilities.model_summary import ModelSummary as LightningSummary

    from trainmesh.utilities.model_summary import ModelSummary as LightningNamedSummary

    def read(summary):
        layers = summary.summarize()
        handles = [layer._hook_handle for layer in layers.values()]
        hooked = any(h is not None and h.id in (h.hooks_dict_ref() or {}) for h in handles)
        columns = [(n, s.layer_type, s.num_parameters, s.in_size, s.out_size, s.training) for n, s in layers.items()]
        return columns, hooked, type(layers).__name__

    theirs, ours = modules
    expected = read(LightningSummary(theirs, max_depth=depth))
    assert expected[1] is False and ("pair", "Pair", 40, [[5, 4], [5, 4]], [[5, 6], [5, 2]], True) in expected[0]
    assert read(LightningNamedSummary(ours, max_depth=depth)) == expected


@pytest.mark.parametrize("with_example", [False, True], ids=["no_example", "example_input_array"])
def test_lazy_layers_are_counted_and_warned_of_as_lightning(with_example):
    """A lazy layer (hse-scila/EyeFeatures' classifier head is ``nn.LazyLinear``s): without an example input
    Lightning counts its parameters as 0 and warns "The total number of parameters detected may be
    inaccurate ..." (once a process); with ``example_input_array`` the example's forward initializes them
    first and the totals count them, without the warning. Before: no warning, a line of trainmesh's own
    under the table, and the totals counted before the example's forward (0 for the lazy layer)."""
    import warnings

    import lightning.pytorch as pl
    from lightning.pytorch.utilities.model_summary import model_summary as lightning_summary_module

    import trainmesh as tm
    from trainmesh.utilities.model_summary import table as summary_table_module

    def build(base: type) -> nn.Module:
        class Lazy(base):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
                self.head = nn.LazyLinear(3)
                if with_example:
                    self.example_input_array = torch.zeros(2, 4)

            def forward(self, x):
                return self.head(self.body(x))

        torch.manual_seed(0)
        return Lazy()

    def run(summary_text, module, cache) -> tuple[str, list[str]]:
        cache.clear()  # each keeps its warning once a process: start both afresh
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            text = summary_text(module)
        return text, [str(w.message) for w in caught if "UninitializedParameter" in str(w.message)]

    theirs = run(
        lambda m: str(lightning_summary_module.summarize(m)),
        build(pl.LightningModule),
        lightning_summary_module.warning_cache,
    )
    ours_cache = getattr(summary_table_module, "_WARNINGS", set())  # none before the fix
    ours = run(lambda m: format_summary(summarize(m)), build(tm.LightningModule), ours_cache)
    assert ours == theirs
    assert len(theirs[1]) == (0 if with_example else 1)
    # 30 without the lazy layer's 21 parameters
    assert f"{51 if with_example else 30:<10}Total params" in theirs[0]
