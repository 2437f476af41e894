"""Every public name of Lightning Fabric's ``lightning.fabric.utilities.<module>`` imports from
``trainmesh.fabric.utilities.<module>`` (found by l-progs9: ``from lightning.fabric.utilities.throughput import
measure_flops`` stopped at the import, since ``trainmesh.fabric.utilities`` was a module, not a package).

The names are generated from the installed Fabric, so a name a new Fabric adds fails here until it is answered.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest


def _fabric_public_names() -> list[tuple[str, str]]:
    """(module, name): each module's own public classes and functions and what it re-exports from a module of the
    same leaf name (``apply_to_collection`` from lightning_utilities' ``apply_func``), not what it merely imports."""
    import lightning.fabric.utilities as package

    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_") or info.name == "testing":  # testing: Lightning's own test helpers
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
                    continue
                origin = getattr(value, "__module__", "") or ""
                if origin == module.__name__ or (origin.startswith("lightning") and origin.endswith(f".{info.name}")):
                    found.append((info.name, name))
    return sorted(found)


NAMES = _fabric_public_names()


def test_the_inventory_holds_the_names_programs_import():
    assert ("throughput", "measure_flops") in NAMES and ("throughput", "ThroughputMonitor") in NAMES
    assert ("rank_zero", "rank_zero_only") in NAMES and ("spike", "SpikeDetection") in NAMES


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" for m, n in NAMES])
def test_fabric_s_utilities_name_imports_from_trainmesh_fabric_utilities(module, name):
    ours = importlib.import_module(f"trainmesh.fabric.utilities.{module}")
    assert getattr(ours, name) is not None


def test_the_names_trainmesh_has_are_its_own_objects_not_copies():
    import trainmesh.fabric.utilities.cloud_io as cloud_io
    import trainmesh.fabric.utilities.rank_zero as rank_zero
    import trainmesh.fabric.utilities.seed as seed
    import trainmesh.fabric.utilities.throughput as throughput
    import trainmesh.utilities
    from trainmesh.utilities import cloud_io as tm_cloud_io
    from trainmesh.utilities import flops
    from trainmesh.utilities import rank_zero as tm_rank_zero
    from trainmesh.utilities import seed as tm_seed

    assert throughput.measure_flops is flops.measure_flops
    assert rank_zero.rank_zero_only is tm_rank_zero.rank_zero_only
    assert seed.seed_everything is tm_seed.seed_everything
    assert cloud_io.get_filesystem is tm_cloud_io.get_filesystem
    import trainmesh.fabric.utilities as package

    assert package.rank_zero_only is trainmesh.utilities.rank_zero_only


def test_fabric_s_apply_func_warns_nothing_as_fabric_s():
    import torch

    from trainmesh.fabric.utilities.apply_func import apply_to_collection, convert_tensors_to_scalars

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_to_collection({"a": torch.ones(1)}, torch.Tensor, lambda t: t * 2)["a"].item() == 2.0
        assert convert_tensors_to_scalars([torch.tensor(3)]) == [3]


def test_fabric_s_has_len_warns_as_fabric_s():
    import lightning.fabric.utilities.data as theirs
    import torch

    import trainmesh.fabric.utilities.data as ours

    class Sized(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([1, 2])

        def __len__(self):
            return 2

    answers = []
    for module in (theirs, ours):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = [module.has_len(x) for x in ([], torch.utils.data.DataLoader(Sized()), iter([1]))]
        answers.append((found, [str(w.message) for w in caught]))
    assert answers[1] == answers[0]
    assert len(answers[0][1]) == 2
