"""Lightning's ``demos`` modules that published programs import by path.

``from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule`` (Lightning's GAN and
other examples) ports as ``from trainmesh.demos.mnist_datamodule import MNISTDataModule``.
"""
