"""``CLI(Model, DataModule)``: the ``trainmesh`` command line for a user's own ``main.py``.

Lightning users write a three-line script around ``LightningCLI``; this is the same, built on
the parser of the ``trainmesh`` command (:mod:`trainmesh.cli.main`), so both accept the same
subcommands, ``--config`` files and ``--model.<arg>`` / ``--data.<arg>`` / ``--trainer.<arg>``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmesh.trainer.trainer import Trainer


class CLI:
    """Parse the command line for ``model_class`` (and ``datamodule_class``) and run the subcommand.

    ``python main.py fit --model.hidden 8 --trainer.max_epochs 1`` trains, ``validate``, ``test``
    and ``predict`` evaluate (``--ckpt_path`` loads weights), ``--config run.yaml`` reads a file
    with ``model``, ``data`` and ``trainer`` sections and ``--print_config`` writes one. A mistake
    in the arguments prints ``error: ...`` and exits with status 2. Afterwards ``trainer``,
    ``model`` and ``datamodule`` hold what was built. Without a ``datamodule_class`` the model's
    own ``*_dataloader`` methods supply the data.

    >>> # main.py
    >>> from trainmesh.cli import CLI  # doctest: +SKIP
    >>> if __name__ == "__main__":  # doctest: +SKIP
    ...     CLI(MyModel, MyDataModule)
    """

    def __init__(
        self,
        model_class: type,
        datamodule_class: type | None = None,
        *,
        args: list[str] | None = None,
        run: bool = True,
    ) -> None:
        for role, cls in (("model_class", model_class), ("datamodule_class", datamodule_class)):
            if cls is not None and not isinstance(cls, type):
                raise TypeError(
                    f"CLI({role}=...) takes the class itself, e.g. CLI(MyModel, MyData); got the "
                    f"{type(cls).__name__} {cls!r}. Pass the class, not an instance or a name"
                )
        self.classes: dict[str, type] = {"model": model_class}
        if datamodule_class is not None:
            self.classes["data"] = datamodule_class
        self.prog = os.path.basename(sys.argv[0]) or "main.py"
        self.args = list(sys.argv[1:] if args is None else args)
        self.trainer: Trainer | None = None
        self.model: Any = None
        self.datamodule: Any = None
        if run:
            self.run()

    def run(self) -> None:
        """Parse ``args`` and run; exits the interpreter (SystemExit) with a non-zero status on failure."""
        from trainmesh.cli.main import main

        status = main(self.args, cli=self)
        if status != 0:
            raise SystemExit(status)
