"""Lightning's ``python -m lightning.pytorch.utilities.upgrade_checkpoint``: refused (see
``utilities.migration``: trainmesh loads older Lightning checkpoints as they are)."""

from trainmesh.utilities.refusal import refused_class

main = refused_class(
    "main",
    "it rewrites checkpoints of an older Lightning; trainmesh loads Lightning 1.x and 2.x checkpoints "
    "as they are: pass the file to Trainer.fit(ckpt_path=...) or load_from_checkpoint",
    module=__name__,
)

__all__ = ["main"]
