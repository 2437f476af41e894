"""``trainmesh.serve`` (Lightning 2.6's ``ServableModule`` and ``ServableModuleValidator``) against
Lightning's: Lightning's documented example (a BoringModel made servable) is served by the
validator at the start of fit under each framework; the same response comes back, the same
callback state is kept, and the model trains the same weights after it. A model without the API is
refused as Lightning refuses it."""

from __future__ import annotations

import importlib
import socket

import pytest
import torch

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_fit(L, root):
    serve = importlib.import_module(L.pl.__name__ + ".serve")
    demos = importlib.import_module(L.pl.__name__ + ".demos")

    class ServableBoringModel(demos.BoringModel, serve.ServableModule):
        def configure_payload(self):
            return {"body": {"x": list(range(32))}}

        def configure_serialization(self):
            return {"x": lambda x: torch.tensor(x, dtype=torch.float)}, {"output": lambda x: x.tolist()}

        def serve_step(self, x):
            return {"output": (self(x) > 0).long()}

        def configure_response(self):
            return {"output": (self(torch.arange(32.0)) > 0).long().tolist()}

    validator = serve.ServableModuleValidator(port=_free_port())
    model = ServableBoringModel()
    settings = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=0, callbacks=[validator])
    settings.update(logger=False, enable_checkpointing=False)
    trainer = L.pl.Trainer(**trainer_kwargs(root, **settings))
    trainer.fit(model)
    refusing = L.pl.Trainer(**trainer_kwargs(root, **{**settings, "callbacks": [serve.ServableModuleValidator()]}))
    with pytest.raises(TypeError, match="should be subclass of ServableModule"):
        refusing.fit(demos.BoringModel())  # the validator refuses a model without the API before serving
    return outcome(trainer, model, root), validator.resp.json(), validator.state_dict()


def test_the_validator_serves_the_model_as_lightnings(tmp_path):
    found = run_both(served_fit, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"][2] == {"successful": True, "optimization": None, "server": "fastapi"}
