"""``trainmesh.demos``' language models (``Transformer``/``LightningTransformer`` and
``SimpleLSTM``/``LightningLSTM`` over ``WikiText2``) against Lightning 2.6's: the same weights and
losses after a few steps on a small text file already on disk (``WikiText2`` downloads only where
``./data/wikitext-2.txt`` is missing, as Lightning's)."""

from __future__ import annotations

import importlib

import pytest

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def language_models(L, root):
    demos = importlib.import_module(L.pl.__name__ + ".demos")
    found = {}
    for model in (demos.LightningTransformer(vocab_size=30), demos.LightningLSTM(vocab_size=30)):
        # the demo modules read ./data/wikitext-2.txt (the test runs in its folder)
        settings = dict(max_epochs=1, limit_train_batches=1, logger=L.loggers.CSVLogger(root / type(model).__name__))
        trainer = L.pl.Trainer(**trainer_kwargs(root, enable_checkpointing=False, **settings))
        trainer.fit(model)
        found[type(model).__name__] = outcome(trainer, model, root)
    dataset = demos.WikiText2(block_size=5)
    found["data"] = (len(dataset), dataset.vocab_size, [t.tolist() for t in dataset[3]])
    return found


def test_language_models_train_as_lightnings_demos(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    words = [f"w{i % 29}" for i in range(3000)]
    (tmp_path / "data" / "wikitext-2.txt").write_text(
        "\n".join(" ".join(words[i : i + 20]) for i in range(0, 3000, 20))
    )
    monkeypatch.chdir(tmp_path)
    found = run_both(language_models, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"]["data"][1] == 30  # 29 words and <eos>
