"""Lightning 2.6's ``lightning.pytorch.serve``: ``ServableModule`` (the API a model implements to be
served) and ``ServableModuleValidator`` (a callback that serves the model with FastAPI in a separate
process at the start of training, sends it the model's payload and checks the response).
"""

from trainmesh.serve.servable_module import ServableModule
from trainmesh.serve.servable_module_validator import ServableModuleValidator

__all__ = ["ServableModuleValidator", "ServableModule"]
