"""``cli_lightning_logo()``: the banner a Lightning program prints before its ``LightningCLI``
(``from lightning.pytorch import cli_lightning_logo``); here it is trainmesh's own."""

from __future__ import annotations

TRAINMESH_LOGO = r"""
   o---o---o
   |\ /|\ /|      _            _                           _
   | o | o |     | |_ _ __ __ _(_)_ __  _ __ ___   ___  ___| |__
   |/ \|/ \|     | __| '__/ _` | | '_ \| '_ ` _ \ / _ \/ __| '_ \
   o---o---o     | |_| | | (_| | | | | | | | | | |  __/\__ \ | | |
   |\ /|\ /|      \__|_|  \__,_|_|_| |_|_| |_| |_|\___||___/_| |_|
   | o | o |
   |/ \|/ \|     one model, written once, trained on one device or many
   o---o---o
"""


def cli_lightning_logo() -> None:
    """Print trainmesh's banner (where Lightning prints its logo), in colour on a terminal.

    Examples:
        >>> cli_lightning_logo()  # doctest: +SKIP
    """
    import sys

    colour, reset = ("\033[0;36m", "\033[0m") if sys.stdout.isatty() else ("", "")
    print()
    print(colour + TRAINMESH_LOGO + reset)
    print()
