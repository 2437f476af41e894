"""Fabric's loggers beside a LightningCLI: ``--trainer.logger CSVLogger`` names one class.

jsonargparse resolves a class name among the subclasses of the annotated type (the Trainer's
``Logger``). Lightning's Fabric loggers are no Trainer loggers; trainmesh's Fabric CSV logger
subclasses the Trainer's, so under the name ``CSVLogger`` it made the name ambiguous in any process
that had imported trainmesh.fabric ("Multiple subclasses with name CSVLogger": the CLI stopped).
"""

from __future__ import annotations

from jsonargparse._typehints import resolve_class_path_by_name


def test_the_trainer_s_csv_logger_is_the_one_class_of_its_name_with_fabric_imported():
    import lightning.fabric.loggers  # noqa: F401
    import lightning.pytorch.loggers as theirs

    import trainmesh.fabric.loggers as fabric_loggers
    import trainmesh.loggers as ours

    assert resolve_class_path_by_name(theirs.Logger, "CSVLogger").endswith("CSVLogger")
    resolved = resolve_class_path_by_name(ours.Logger, "CSVLogger")
    assert resolved.rsplit(".", 1)[0].startswith("trainmesh.loggers"), resolved
    assert fabric_loggers.CSVLogger is fabric_loggers.FabricCSVLogger
