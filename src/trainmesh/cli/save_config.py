"""``SaveConfigCallback``: ``LightningCLI`` writes the run's full config next to its logs."""

from __future__ import annotations

import os
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView


class SaveConfigCallback(Callback):
    """Write the parsed config to ``<trainer.log_dir>/<config_filename>`` when a run sets up, as
    Lightning's: global rank 0 writes it, once per CLI, and an existing file stops the run
    (``overwrite=True`` replaces it) so that a run never overwrites another's record.

    Override :meth:`save_config` to save it elsewhere as well (it runs on rank 0 only);
    ``save_to_log_dir=False`` then skips the file. ``LightningCLI(save_config_callback=None)``
    turns it off; ``save_config_kwargs`` are this class's arguments.
    """

    def __init__(
        self,
        parser: Any,
        config: Any,
        config_filename: str = "config.yaml",
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError(
                "SaveConfigCallback(save_to_log_dir=False) saves nothing: override save_config() in a "
                "subclass to save the config elsewhere, or pass save_config_callback=None to LightningCLI"
            )

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            self._write(trainer)
        if trainer.is_global_zero:
            self.save_config(trainer, module, stage)
            self.already_saved = True
        # Every rank agrees, so that a later setup() (fit, then test) skips on all of them.
        self.already_saved = trainer.runtime.broadcast(self.already_saved)

    def _write(self, trainer: TrainerView) -> None:
        path = os.path.join(trainer.log_dir, self.config_filename)
        if not self.overwrite:
            exists = trainer.runtime.broadcast(os.path.isfile(path) if trainer.is_global_zero else False)
            if exists:
                raise RuntimeError(
                    f"{type(self).__name__}: {path} exists already; it is the config of an earlier run "
                    "and is kept. Delete it, choose another log folder, pass LightningCLI("
                    'save_config_kwargs={"overwrite": True}) to replace it, or save_config_callback=None '
                    "to save no config"
                )
        if trainer.is_global_zero:
            # The logger creates its folder at its first write, which comes later.
            os.makedirs(trainer.log_dir, exist_ok=True)
            self.parser.save(self.config, path, skip_unset=False, overwrite=self.overwrite, multifile=self.multifile)

    def save_config(self, trainer: TrainerView, module: Any, stage: str) -> None:
        """Save the config somewhere else too (a logger's hyperparameters, say); rank 0 only, so
        no collective call may be made here.

        >>> # trainer.logger.log_hyperparams({"config": self.parser.dump(self.config, skip_none=False)})
        """
