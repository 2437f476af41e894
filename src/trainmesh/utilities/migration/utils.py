"""Lightning's ``lightning.pytorch.utilities.migration.utils`` path (see the package's docstring)."""

from trainmesh.utilities.refusal import refused_class

_WHY = (
    "it upgrades a checkpoint of an older Lightning in place; trainmesh loads Lightning 1.x and 2.x "
    "checkpoints as they are: pass the file to Trainer.fit(ckpt_path=...) or load_from_checkpoint"
)
migrate_checkpoint = refused_class("migrate_checkpoint", _WHY, module=__name__)
pl_legacy_patch = refused_class("pl_legacy_patch", _WHY, module=__name__)

__all__ = ["migrate_checkpoint", "pl_legacy_patch"]
