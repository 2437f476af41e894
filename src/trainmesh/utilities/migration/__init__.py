"""Lightning's ``lightning.pytorch.utilities.migration``: upgrading checkpoints written by older
Lightning versions. Refused: trainmesh reads Lightning 1.x and 2.x checkpoints as they are
(``Trainer.fit(ckpt_path=...)``, ``load_from_checkpoint``) and writes nothing back into them."""

from trainmesh.utilities.migration.utils import migrate_checkpoint, pl_legacy_patch

__all__ = ["migrate_checkpoint", "pl_legacy_patch"]
