"""What trainmesh said: its info lines go through the logging module (stderr), as Lightning's do."""

from __future__ import annotations

import logging

import pytest


def said(caplog: pytest.LogCaptureFixture) -> str:
    """The messages logged since the last call (``caplog`` at INFO for ``trainmesh``), one a line."""
    caplog.set_level(logging.INFO, logger="trainmesh")
    text = "\n".join(caplog.messages)
    caplog.clear()
    return text
