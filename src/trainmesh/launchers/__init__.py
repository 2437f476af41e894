"""How worker processes start. A launcher never knows what a strategy does with them."""

from trainmesh.launchers.base import Launcher, ProcessInfo
from trainmesh.launchers.in_process import InProcessLauncher

__all__ = ["Launcher", "ProcessInfo", "InProcessLauncher"]
