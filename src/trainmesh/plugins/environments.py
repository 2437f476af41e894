"""Lightning's cluster environments: where a process reads its rank, world size and main address.

trainmesh recognises the processes torchrun and SLURM start by itself (``launchers/environments.py``)
and otherwise starts them itself, so ``Trainer(plugins=[SLURMEnvironment()])`` states what trainmesh
would find anyway: it is accepted where that environment is the one the process is in (its
``detect()``), and refused with the reason where it is not. Kubeflow, LSF and MPI environments
answer Lightning's questions when called, but a Trainer is not run under them: start the script
with torchrun there.

>>> LightningEnvironment().creates_processes_externally
False
"""

from __future__ import annotations

import os
import signal
from typing import Any

from trainmesh.utilities.refusal import refused_class


class ClusterEnvironment:
    """Lightning's interface: the process's place in the run, read from the environment."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", "12910"))

    @staticmethod
    def detect() -> bool:
        raise NotImplementedError

    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    def global_rank(self) -> int:
        return int(os.environ.get("RANK", "0"))

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))

    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Nothing to check beyond what the launcher checks."""

    def teardown(self) -> None:
        """Nothing to undo."""

    # Why a Trainer given this environment cannot run in this process (None: it can).
    def trainer_refusal(self) -> str | None:
        if self.detect():
            return None
        return (
            f"plugins=[{type(self).__name__}()] but this process was not started by it ({type(self).__name__}"
            ".detect() is False); trainmesh recognises torchrun and SLURM by itself and otherwise starts the "
            "processes: leave the plugin out"
        )


class LightningEnvironment(ClusterEnvironment):
    """The processes are started by the Trainer itself (no torchrun, no SLURM job step)."""

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ

    @staticmethod
    def detect() -> bool:
        return True

    def trainer_refusal(self) -> str | None:
        for other in (TorchElasticEnvironment, SLURMEnvironment):
            if other.detect():
                return (
                    f"plugins=[LightningEnvironment()] but this process was started by {other.__name__[:-11]}, "
                    "and trainmesh reads its place from there; leave the plugin out"
                )
        return None


class TorchElasticEnvironment(ClusterEnvironment):
    """Processes started by torchrun (torch's elastic agent)."""

    @staticmethod
    def detect() -> bool:
        return os.getenv("TORCHELASTIC_RUN_ID") is not None  # torch.distributed.is_torchelastic_launched()

    def node_rank(self) -> int:
        return int(os.environ.get("GROUP_RANK", "0"))


class SLURMEnvironment(ClusterEnvironment):
    """Processes started by SLURM's srun (one per task); SIGUSR1 saves, stops and requeues the job."""

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal or signal.SIGUSR1

    @staticmethod
    def detect() -> bool:
        job_name = os.environ.get("SLURM_JOB_NAME")
        return "SLURM_NTASKS" in os.environ and job_name not in ("bash", "interactive")

    def world_size(self) -> int:
        return int(os.environ["SLURM_NTASKS"])

    def global_rank(self) -> int:
        return int(os.environ["SLURM_PROCID"])

    def local_rank(self) -> int:
        return int(os.environ["SLURM_LOCALID"])

    def node_rank(self) -> int:
        return int(os.environ["SLURM_NODEID"])

    def trainer_refusal(self) -> str | None:
        if not self.auto_requeue or self.requeue_signal != signal.SIGUSR1:
            return (
                f"SLURMEnvironment(auto_requeue={self.auto_requeue}, requeue_signal={self.requeue_signal!r}): "
                "trainmesh saves, stops and requeues the job on SIGUSR1 under SLURM (sbatch --signal=USR1@90 "
                "--requeue) and has no switch for it; use SLURMEnvironment() or leave the plugin out"
            )
        return super().trainer_refusal()


def running_environment() -> ClusterEnvironment:
    """The environment this process was started in, as Lightning's connector picks it: SLURM's job
    step, torchrun's workers (not trainmesh's own elastic agent's: those are the processes the
    Trainer starts, Lightning's ``LightningEnvironment``), else ``LightningEnvironment``."""
    if SLURMEnvironment.detect():
        return SLURMEnvironment()
    if TorchElasticEnvironment.detect() and "TRAINMESH_ELASTIC_AGENT" not in os.environ:
        return TorchElasticEnvironment()
    return LightningEnvironment()


class _NotForTheTrainer(ClusterEnvironment):
    """An environment whose variables trainmesh does not read to place its processes."""

    def trainer_refusal(self) -> str | None:
        return (
            f"plugins=[{type(self).__name__}()]: trainmesh places its processes from torchrun's or SLURM's "
            "variables, or starts them itself; start the script with torchrun on each node instead"
        )


class KubeflowEnvironment(_NotForTheTrainer):
    """A Kubeflow PyTorchJob: one process per pod, MASTER_ADDR/WORLD_SIZE/RANK set by the operator."""

    @staticmethod
    def detect() -> bool:
        return "KUBERNETES_PORT" in os.environ and {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"} <= set(
            os.environ
        )

    def node_rank(self) -> int:
        return self.global_rank()


class LSFEnvironment(_NotForTheTrainer):
    """IBM Spectrum LSF (jsrun): the job's ranks from LSF's variables."""

    @staticmethod
    def detect() -> bool:
        return {"LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE"} <= set(os.environ)

    def world_size(self) -> int:
        return int(os.environ["JSM_NAMESPACE_SIZE"])

    def global_rank(self) -> int:
        return int(os.environ["JSM_NAMESPACE_RANK"])

    def local_rank(self) -> int:
        return int(os.environ["JSM_NAMESPACE_LOCAL_RANK"])


class MPIEnvironment(_NotForTheTrainer):
    """Processes started by mpirun (ranks read through mpi4py)."""

    @staticmethod
    def detect() -> bool:
        return any(name in os.environ for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"))

    def world_size(self) -> int:
        return int(_first("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", default="1"))

    def global_rank(self) -> int:
        return int(_first("OMPI_COMM_WORLD_RANK", "PMI_RANK", default="0"))

    def local_rank(self) -> int:
        return int(_first("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", default="0"))


XLAEnvironment = refused_class(
    "XLAEnvironment", "TPUs (torch_xla) are not supported by trainmesh; leave the plugin out", module=__name__
)
BaguaEnvironment = refused_class(
    "BaguaEnvironment",
    "Bagua is not supported by trainmesh; use strategy='ddp' and leave the plugin out",
    module=__name__,
)


def find_free_network_port() -> int:
    """A free port on this machine for a single-node rendezvous (``MASTER_PORT``); ``STANDALONE_PORT``'s value
    where that is set (Fabric's ``lightning.fabric.plugins.environments.lightning.find_free_network_port``)."""
    if "STANDALONE_PORT" in os.environ:
        return int(os.environ["STANDALONE_PORT"])
    from trainmesh.launchers.environments import find_free_port

    return find_free_port("")


def _first(*names: str, default: Any) -> Any:
    return next((os.environ[n] for n in names if n in os.environ), default)


__all__ = [
    "BaguaEnvironment",
    "ClusterEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LightningEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
    "find_free_network_port",
]
