"""Lightning's ``utilities.seed`` names: ``isolate_rng`` restores every RNG when its block ends."""

from trainmesh.seed import isolate_rng, seed_everything

__all__ = ["isolate_rng", "seed_everything"]
