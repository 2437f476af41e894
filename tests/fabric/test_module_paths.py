"""Lightning Fabric 2.6's public module paths under trainmesh.fabric: each imports, and gives the objects Fabric
gives there (where Fabric's module and package hold one object, trainmesh's hold one object too, not a copy)."""

from __future__ import annotations

import importlib
from collections import defaultdict

import pytest

pytest.importorskip("lightning.fabric")

from helpers.fabric_inventory import _public_names, fabric_modules  # noqa: E402


def test_every_fabric_module_path_imports_and_holds_the_objects_fabric_holds_there():
    ours_by_fabric_object: dict[int, set[int]] = defaultdict(set)
    where: dict[int, list[str]] = defaultdict(list)
    for path in fabric_modules():
        theirs = importlib.import_module(f"lightning.fabric.{path}")
        ours = importlib.import_module(f"trainmesh.fabric.{path}")  # ImportError: a path a program cannot import
        for name in _public_names(theirs.__name__):
            ours_by_fabric_object[id(getattr(theirs, name))].add(id(getattr(ours, name)))
            where[id(getattr(theirs, name))].append(f"{path}.{name}")
    # `plugins.precision.amp.MixedPrecision` is `plugins.MixedPrecision` under Fabric: a second copy of the class
    # (another class of the same name) breaks isinstance and subclassing across the two spellings
    copies = [where[theirs] for theirs, ours in ours_by_fabric_object.items() if len(ours) > 1]
    assert not copies, copies


def test_a_face_module_is_no_package_of_the_trainer_side_s_files():
    import trainmesh.fabric.plugins
    import trainmesh.plugins.precision

    # a package of no files: below it, only Fabric's paths, each the Trainer side's module, not a copy of its file
    assert trainmesh.fabric.plugins.__path__ == []
    assert (
        importlib.import_module("trainmesh.fabric.plugins.precision").Precision is trainmesh.plugins.precision.Precision
    )
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("trainmesh.fabric.plugins.layer_sync")  # trainmesh.plugins' file, not Fabric's path


@pytest.mark.parametrize("value", [None, "0", "1"])
def test_is_using_cli_reads_lt_cli_used_as_fabric_s(monkeypatch, value):
    from lightning.fabric.connector import _is_using_cli as theirs

    from trainmesh.fabric.connector import _is_using_cli as ours

    if value is None:
        monkeypatch.delenv("LT_CLI_USED", raising=False)
    else:
        monkeypatch.setenv("LT_CLI_USED", value)
    assert ours() is theirs() is (value == "1")


def test_find_free_network_port_and_is_cuda_available_answer_as_fabric_s(monkeypatch):
    import socket

    from lightning.fabric.accelerators.cuda import is_cuda_available as their_cuda
    from lightning.fabric.plugins.environments.lightning import find_free_network_port as theirs

    from trainmesh.fabric.accelerators.cuda import is_cuda_available as our_cuda
    from trainmesh.fabric.plugins.environments.lightning import find_free_network_port as ours

    assert our_cuda() is their_cuda()
    monkeypatch.setenv("STANDALONE_PORT", "29517")
    assert ours() == theirs() == 29517
    monkeypatch.delenv("STANDALONE_PORT")
    port = ours()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", port))  # free, as Fabric's answer is


def test_the_fabric_paths_of_what_trainmesh_cannot_run_are_refused_with_the_reason():
    from trainmesh.fabric.cli import main
    from trainmesh.fabric.strategies.xla_fsdp import XLAFSDPStrategy
    from trainmesh.utilities.refusal import RefusedError

    with pytest.raises(RefusedError, match="fabric run"):
        main()
    with pytest.raises(RefusedError, match="TPUs"):
        XLAFSDPStrategy()
