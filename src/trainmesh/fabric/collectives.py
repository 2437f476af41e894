"""``lightning.fabric.plugins.collectives``: Fabric's collective objects (experimental in Fabric 2.6), each call
one of ``torch.distributed``'s on the group the object owns, with Fabric's arguments and return values.

``TorchCollective().setup(main_address=..., main_port=...)`` forms the default group (``init_process_group``, the
address and port used where the environment has none) unless one exists; ``create_group(ranks=...)`` owns a new
group; ``teardown()`` destroys it, and the default group too when this class formed it and no other group is left.
``SingleDeviceCollective`` answers as one process would: every call returns its input.

>>> SingleDeviceCollective().all_reduce(torch.tensor(3.0))
tensor(3.)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from trainmesh.launchers.environments import main_address_for_rendezvous

__all__ = ["Collective", "SingleDeviceCollective", "TorchCollective"]


class Collective(ABC):
    """A group of processes and the collective calls over it (Fabric's interface)."""

    def __init__(self) -> None:
        self._group: Any = None

    @property
    @abstractmethod
    def rank(self) -> int: ...

    @property
    @abstractmethod
    def world_size(self) -> int: ...

    @property
    def group(self) -> Any:
        if self._group is None:
            raise RuntimeError(
                f"`{type(self).__name__}` does not own a group. HINT: try `collective.create_group().group`"
            )
        return self._group

    @abstractmethod
    def broadcast(self, tensor: Tensor, src: int) -> Tensor: ...
    @abstractmethod
    def all_reduce(self, tensor: Tensor, op: str) -> Tensor: ...
    @abstractmethod
    def reduce(self, tensor: Tensor, dst: int, op: str) -> Tensor: ...
    @abstractmethod
    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor) -> list[Tensor]: ...
    @abstractmethod
    def gather(self, tensor: Tensor, gather_list: list[Tensor], dst: int = 0) -> list[Tensor]: ...
    @abstractmethod
    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], src: int = 0) -> Tensor: ...
    @abstractmethod
    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], op: str) -> Tensor: ...
    @abstractmethod
    def all_to_all(self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor]) -> list[Tensor]: ...
    @abstractmethod
    def send(self, tensor: Tensor, dst: int, tag: int = 0) -> None: ...
    @abstractmethod
    def recv(self, tensor: Tensor, src: int | None = None, tag: int = 0) -> Tensor: ...
    @abstractmethod
    def barrier(self, device_ids: list[int] | None = None) -> None: ...
    @classmethod
    @abstractmethod
    def is_available(cls) -> bool: ...
    @classmethod
    @abstractmethod
    def is_initialized(cls) -> bool: ...
    @classmethod
    @abstractmethod
    def init_group(cls, **kwargs: Any) -> None: ...
    @classmethod
    @abstractmethod
    def new_group(cls, **kwargs: Any) -> Any: ...
    @classmethod
    @abstractmethod
    def destroy_group(cls, group: Any) -> None: ...
    @classmethod
    @abstractmethod
    def _convert_to_native_op(cls, op: str) -> Any: ...

    def setup(self, **kwargs: Any) -> Any:
        """Form the default group (``init_group(**kwargs)``) unless one is formed already."""
        if not self.is_initialized():
            self.init_group(**kwargs)
        return self

    def create_group(self, **kwargs: Any) -> Any:
        """Own a new group (``new_group(**kwargs)``), once."""
        if self._group is not None:
            raise RuntimeError(f"`{type(self).__name__}` already owns a group.")
        self._group = self.new_group(**kwargs)
        return self

    def teardown(self) -> Any:
        """Destroy the owned group."""
        if self._group is None:
            raise RuntimeError(f"`{type(self).__name__}` does not own a group to destroy.")
        self.destroy_group(self._group)
        self._group = None
        return self


class SingleDeviceCollective(Collective):
    """One process: each call returns what it was given (a list's first item where one tensor is asked)."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def broadcast(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def all_reduce(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def reduce(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor, **__: Any) -> list[Tensor]:
        return [tensor]

    def gather(self, tensor: Tensor, *_: Any, **__: Any) -> list[Tensor]:
        return [tensor]

    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], *_: Any, **__: Any) -> Tensor:
        return scatter_list[0]

    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], *_: Any, **__: Any) -> Tensor:
        return input_list[0]

    def all_to_all(
        self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor], *_: Any, **__: Any
    ) -> list[Tensor]:
        return input_tensor_list

    def send(self, *_: Any, **__: Any) -> None:
        """Nothing to send to."""

    def recv(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def barrier(self, *_: Any, **__: Any) -> None:
        """Nobody to wait for."""

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def is_initialized(cls) -> bool:
        return True

    @classmethod
    def init_group(cls, **_: Any) -> None:
        """One process is its own group."""

    @classmethod
    def new_group(cls, **_: Any) -> Any:
        return object()

    @classmethod
    def destroy_group(cls, group: Any) -> None:
        """Nothing was formed."""

    @classmethod
    def _convert_to_native_op(cls, op: str) -> str:
        return op


class TorchCollective(Collective):
    """``torch.distributed``'s calls on the owned group (the default group until ``create_group``)."""

    manages_default_group = False  # set when this class formed the default group (``setup``), for ``teardown``
    addr_key = "MASTER_ADDR"
    port_key = "MASTER_PORT"

    def __init__(self) -> None:
        if not dist.is_available():
            raise RuntimeError("Torch distributed is not available.")
        super().__init__()

    @property
    def group(self) -> Any:
        if self._group is None:
            self._group = dist.GroupMember.WORLD
        return super().group

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        dist.broadcast(tensor, src, group=self.group)
        return tensor

    def all_reduce(self, tensor: Tensor, op: Any = "sum") -> Tensor:
        dist.all_reduce(tensor, op=self._convert_to_native_op(op), group=self.group)
        return tensor

    def reduce(self, tensor: Tensor, dst: int, op: Any = "sum") -> Tensor:
        dist.reduce(tensor, dst, op=self._convert_to_native_op(op), group=self.group)
        return tensor

    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor) -> list[Tensor]:
        dist.all_gather(tensor_list, tensor, group=self.group)
        return tensor_list

    def gather(self, tensor: Tensor, gather_list: list[Tensor], dst: int = 0) -> list[Tensor]:
        dist.gather(tensor, gather_list, dst, group=self.group)
        return gather_list

    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], src: int = 0) -> Tensor:
        dist.scatter(tensor, scatter_list, src, group=self.group)
        return tensor

    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], op: Any = "sum") -> Tensor:
        dist.reduce_scatter(output, input_list, op=self._convert_to_native_op(op), group=self.group)
        return output

    def all_to_all(self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor]) -> list[Tensor]:
        dist.all_to_all(output_tensor_list, input_tensor_list, group=self.group)
        return output_tensor_list

    def send(self, tensor: Tensor, dst: int, tag: int = 0) -> None:
        dist.send(tensor, dst, tag=tag, group=self.group)

    def recv(self, tensor: Tensor, src: int | None = None, tag: int = 0) -> Tensor:
        dist.recv(tensor, src, tag=tag, group=self.group)
        return tensor

    def all_gather_object(self, object_list: list[Any], obj: Any) -> list[Any]:
        dist.all_gather_object(object_list, obj, group=self.group)
        return object_list

    def broadcast_object_list(self, object_list: list[Any], src: int, device: torch.device | None = None) -> list[Any]:
        dist.broadcast_object_list(object_list, src, group=self.group, device=device)
        return object_list

    def gather_object(self, obj: Any, object_gather_list: list[Any], dst: int = 0) -> list[Any]:
        dist.gather_object(obj, object_gather_list, dst, group=self.group)
        return object_gather_list

    def scatter_object_list(
        self, scatter_object_output_list: list[Any], scatter_object_input_list: list[Any], src: int = 0
    ) -> list[Any]:
        dist.scatter_object_list(scatter_object_output_list, scatter_object_input_list, src, group=self.group)
        return scatter_object_output_list

    def barrier(self, device_ids: list[int] | None = None) -> None:
        if self.group == dist.GroupMember.NON_GROUP_MEMBER:
            return
        dist.barrier(group=self.group, device_ids=device_ids)

    def monitored_barrier(self, timeout: timedelta | None = None, wait_all_ranks: bool = False) -> None:
        dist.monitored_barrier(group=self.group, timeout=timeout, wait_all_ranks=wait_all_ranks)

    def setup(self, main_address: str | None = None, main_port: str | None = None, **kwargs: Any) -> Any:
        """Form the default group (``init_process_group(**kwargs)``) unless one exists: ``main_address`` and
        ``main_port`` are the rendezvous where the environment names none."""
        if self.is_initialized():
            return self
        with main_address_for_rendezvous(main_address, main_port):
            super().setup(**kwargs)
        TorchCollective.manages_default_group = True  # on the class: any instance may tear the group down
        return self

    def teardown(self) -> Any:
        """Destroy the owned group; then the default group, by a member, when this class formed it and it is
        the only group left."""
        member = self.group != dist.GroupMember.NON_GROUP_MEMBER
        super().teardown()
        world = dist.GroupMember.WORLD
        if member and TorchCollective.manages_default_group and world is not None and _groups_left() == 1:
            self.destroy_group(world)
            TorchCollective.manages_default_group = False
        elif TorchCollective.manages_default_group and world is None:
            TorchCollective.manages_default_group = False
        return self

    @classmethod
    def is_available(cls) -> bool:
        return dist.is_available()

    @classmethod
    def is_initialized(cls) -> bool:
        return cls.is_available() and dist.is_initialized()

    @classmethod
    def init_group(cls, **kwargs: Any) -> None:
        dist.init_process_group(**kwargs)

    @classmethod
    def new_group(cls, **kwargs: Any) -> Any:
        return dist.new_group(**kwargs)

    @classmethod
    def destroy_group(cls, group: Any) -> None:
        # a process outside the group holds a placeholder, not a group torch knows: nothing to destroy there
        if group in dist.distributed_c10d._pg_map:
            dist.destroy_process_group(group)

    @classmethod
    def _convert_to_native_op(cls, op: Any) -> Any:
        """``"sum"`` / ``"SUM"`` ... as torch's ``ReduceOp`` member; a ``ReduceOp`` as given."""
        if isinstance(op, (dist.ReduceOp, dist.ReduceOp.RedOpType)):
            return op
        if not isinstance(op, str):
            raise ValueError(f"Unsupported op {op!r} of type {type(op).__name__}")
        value = getattr(dist.ReduceOp, op.upper(), None)
        if value is None:
            raise ValueError(f"op {op.upper()!r} is not a member of `ReduceOp`")
        return value


def _groups_left() -> int:
    return len(dist.distributed_c10d._pg_map)
