"""Every parameter of Lightning 2.6's public callables that trainmesh has (the inventory's modules,
and the methods of the Trainer, LightningModule, LightningDataModule and Callback) is taken by
trainmesh's signature, by name and at Lightning's position, or listed in
``tests/helpers/lightning_signatures.py``'s ``TABLE`` with its reason; each listed entry must still be
true (the parameter still differs; a refused one stops with its reason). Strategy classes are
compared by the strategies' tests, and names refused as a whole are skipped."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("lightning.pytorch")
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

import lightning_signatures as signatures  # noqa: E402


@pytest.fixture(scope="module")
def differences() -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return signatures.all_differences()


def test_every_lightning_parameter_is_taken_or_listed_with_its_reason(differences: dict[str, str]) -> None:
    unlisted = {key: problem for key, problem in differences.items() if key not in signatures.TABLE}
    assert not unlisted, f"Lightning's parameters trainmesh does not take as Lightning does: {unlisted}"


def test_each_listed_parameter_still_differs(differences: dict[str, str]) -> None:
    # An entry whose parameter is now taken (names2x's Trainer arguments once merged) is removed.
    stale = sorted(key for key in signatures.TABLE if key not in differences)
    assert not stale, f"taken now as Lightning takes them, remove from TABLE: {stale}"


def test_the_comparison_reaches_the_callables_and_members() -> None:
    keys = {key for key, _, _ in signatures.pairs()}
    # A few of each kind, so that a lookup that silently finds nothing fails here.
    for key in ("callbacks.ModelCheckpoint", "loggers.CSVLogger", "utilities.rank_zero_only", "seed_everything"):
        assert key in keys
    for key in ("Trainer.save_checkpoint", "LightningModule.log_dict", "Callback.on_train_start"):
        assert key in keys
    for key in ("callbacks.ModelCheckpoint.on_train_batch_end", "callbacks.EarlyStopping.on_validation_end"):
        assert key in keys
    assert not any(key.startswith("strategies.") for key in keys)


@pytest.mark.parametrize("key", sorted(signatures.refusal_calls()))
def test_a_refused_parameter_stops_with_its_reason(key: str) -> None:
    _, reason = signatures.TABLE[key]
    with pytest.raises((RuntimeError, TypeError, ValueError), match=re.escape(reason)):
        signatures.refusal_calls()[key]()


def test_every_refused_entry_has_a_call() -> None:
    refused = {key for key, (kind, _) in signatures.TABLE.items() if kind == "refused"}
    assert refused == set(signatures.refusal_calls())
