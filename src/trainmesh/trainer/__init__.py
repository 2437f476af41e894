from trainmesh.trainer.trainer import Trainer

__all__ = ["Trainer"]
