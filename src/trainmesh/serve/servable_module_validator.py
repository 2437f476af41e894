"""Lightning 2.6.6's ``ServableModuleValidator`` (Apache 2.0, the Lightning AI team), on trainmesh's
callback: at the start of training, rank 0 serves the module with FastAPI/uvicorn in another process,
posts ``configure_payload()`` to it and compares the answer with ``configure_response()``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from multiprocessing import Process
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.serve.servable_module import ServableModule
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.imports import RequirementCache
from trainmesh.utilities.model_helpers import is_overridden
from trainmesh.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    import requests

    from trainmesh.trainer_view import TrainerView

_logger = logging.getLogger(__name__)


class ServableModuleValidator(Callback):
    """Checks that a model implements the ``ServableModule`` API by serving it once, as Lightning's.

    Args:
        optimization: the format the model is served in; only ``None`` (eager) is supported.
        server: the library that serves the model; only ``"fastapi"`` is supported.
        host: the host address of the server.
        port: the port of the server.
        timeout: seconds to wait for the server to start.
        exit_on_failure: raise when the model is not servable.

    Examples:
        >>> validator = ServableModuleValidator(port=8081)
        >>> validator.successful is None, validator.state_dict()["server"]
        (True, 'fastapi')
    """

    def __init__(
        self,
        optimization: Literal["trace", "script", "onnx", "tensorrt"] | None = None,
        server: Literal["fastapi", "ml_server", "torchserve", "sagemaker"] = "fastapi",
        host: str = "127.0.0.1",
        port: int = 8080,
        timeout: int = 20,
        exit_on_failure: bool = True,
    ):
        super().__init__()
        for package in ("fastapi", "uvicorn", "requests"):
            installed = RequirementCache(package)
            if not installed:
                raise ModuleNotFoundError(installed.message)
        if optimization is not None:
            raise NotImplementedError(f"The optimization {optimization} is currently not supported.")
        if server != "fastapi":
            raise NotImplementedError("Only the fastapi server is currently supported.")
        self.optimization = optimization
        self.host = host
        self.port = port
        self.server = server
        self.timeout = timeout
        self.exit_on_failure = exit_on_failure
        self.resp: requests.Response | None = None

    @rank_zero_only
    def on_train_start(self, trainer: TrainerView, servable_module: Any) -> None:
        """Serve the module, send it its payload and check the response."""
        import requests

        # Lightning refuses its FSDP and DeepSpeed strategies: the served copy would hold shards.
        if trainer.runtime.capabilities.shards_parameters:
            raise Exception(
                f"The current strategy {type(getattr(trainer, 'strategy', None)).__qualname__} used "
                "by the trainer isn't supported for sanity serving yet."
            )
        if not isinstance(servable_module, ServableModule):
            raise TypeError(f"The provided model should be subclass of {ServableModule.__qualname__}.")
        for hook in ("configure_payload", "configure_serialization", "serve_step"):
            if not is_overridden(hook, servable_module, ServableModule):
                raise NotImplementedError(f"The `{hook}` method needs to be overridden.")

        # The served copy goes to the process without the trainer (the Module's pickled state
        # leaves it out), as Lightning detaches it before starting the process.
        process = Process(target=self._start_server, args=(servable_module, self.host, self.port, self.optimization))
        process.start()
        ready, t0 = False, time.time()
        while not ready:
            with contextlib.suppress(requests.exceptions.ConnectionError):
                ready = requests.get(f"http://{self.host}:{self.port}/ping").status_code == 200
            if time.time() - t0 > self.timeout:
                process.kill()
                raise Exception(f"The server didn't start within {self.timeout} seconds.")
            time.sleep(0.1)

        payload = servable_module.configure_payload()
        if "body" not in payload:
            raise Exception(f'Your provided payload {payload} should have a field named "body".')
        self.resp = requests.post(f"http://{self.host}:{self.port}/serve", json=payload)
        process.kill()

        if is_overridden("configure_response", servable_module, ServableModule):
            response = servable_module.configure_response()
            if self.resp.json() != response:
                raise Exception(f"The expected response {response} doesn't match the generated one {self.resp.json()}.")
        if self.exit_on_failure and not self.successful:
            raise MisconfigurationException("The model isn't servable. Investigate the traceback and try again.")
        if self.successful:
            _logger.info(f"Your model is servable and the received payload was {self.resp.json()}.")

    @property
    def successful(self) -> bool | None:
        """Whether the model was served successfully (None before it was tried)."""
        return self.resp.status_code == 200 if self.resp else None

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the callback, as Lightning's."""
        return {"successful": self.successful, "optimization": self.optimization, "server": self.server}

    @staticmethod
    def _start_server(servable_model: ServableModule, host: str, port: int, _: Any) -> None:
        """Serve ``servable_model`` with a ``/serve`` and a ``/ping`` endpoint (in the server process)."""
        from fastapi import Body, FastAPI
        from uvicorn import run

        app = FastAPI()
        deserializers, serializers = servable_model.configure_serialization()
        servable_model.eval()  # a copy: the training process's module keeps its mode

        @app.get("/ping")
        def ping() -> bool:
            return True

        @app.post("/serve")
        async def serve(payload: dict = Body(...)) -> dict[str, Any]:  # noqa: B008 - FastAPI's idiom
            body = payload["body"]
            for key, deserializer in deserializers.items():
                body[key] = deserializer(body[key])
            with torch.no_grad():
                output = servable_model.serve_step(**body)
            if not isinstance(output, dict):
                raise Exception(f"Please, return your outputs as a dictionary. Found {output}")
            for key, serializer in serializers.items():
                output[key] = serializer(output[key])
            return output

        run(app, host=host, port=port, log_level="error")
