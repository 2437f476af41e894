"""Fabric's loggers beside a LightningCLI: ``--trainer.logger CSVLogger`` names one class.

jsonargparse resolves a class name among the subclasses of the annotated type (the Trainer's
``Logger``). Lightning's Fabric loggers are no Trainer loggers; trainmesh's Fabric CSV logger
subclassed the Trainer's, so the name ``CSVLogger`` was ambiguous in any process that had imported
trainmesh.fabric ("Multiple subclasses with name CSVLogger": the CLI stopped). Now, as Lightning's, a
Fabric logger is no Trainer logger, and the Trainer's logger is a Fabric one.
"""

from __future__ import annotations

from jsonargparse._typehints import resolve_class_path_by_name


def test_the_trainer_s_csv_logger_is_the_one_class_of_its_name_with_fabric_imported():
    import lightning.fabric.loggers
    import lightning.pytorch.loggers as theirs

    import trainmesh.fabric.loggers as fabric_loggers
    import trainmesh.loggers as ours

    assert resolve_class_path_by_name(theirs.Logger, "CSVLogger").endswith("CSVLogger")
    resolved = resolve_class_path_by_name(ours.Logger, "CSVLogger")
    assert resolved.rsplit(".", 1)[0].startswith("trainmesh.loggers"), resolved
    assert fabric_loggers.CSVLogger.__name__ == lightning.fabric.loggers.CSVLogger.__name__ == "CSVLogger"
    for fabric_side, trainer_side in ((lightning.fabric.loggers, theirs), (fabric_loggers, ours)):
        assert not issubclass(fabric_side.CSVLogger, trainer_side.Logger)
        assert issubclass(fabric_side.CSVLogger, fabric_side.Logger)
        assert issubclass(trainer_side.CSVLogger, fabric_side.Logger)


def test_fabric_s_logger_module_paths_import_as_lightning_s():
    # ``from lightning.fabric.loggers.tensorboard import TensorBoardLogger`` (a published Fabric program's
    # import): ModuleNotFoundError before, trainmesh.fabric.loggers being one module
    import importlib

    import trainmesh.fabric.loggers as fabric_loggers

    for module, names in (
        ("tensorboard", ["TensorBoardLogger"]),
        ("csv_logs", ["CSVLogger"]),
        ("logger", ["Logger", "rank_zero_experiment"]),
    ):
        theirs = importlib.import_module(f"lightning.fabric.loggers.{module}")
        ours = importlib.import_module(f"trainmesh.fabric.loggers.{module}")
        for name in names:
            assert hasattr(theirs, name), (module, name)
            # the package's own object (trainmesh's Fabric TensorBoard class is named FabricTensorBoardLogger:
            # it is defined beside the Trainer's TensorBoardLogger, as Lightning's module imports it)
            assert getattr(ours, name) is getattr(fabric_loggers, name, None) or name == "rank_zero_experiment"
            assert callable(getattr(ours, name)), (module, name)
