"""Lightning 2.6's demo classes (``lightning.pytorch.demos``), on trainmesh's Module and DataModule:
the ``BoringModel`` bug reports and tests start from, its data modules and datasets, a small
transformer and LSTM language model over WikiText-2, and the MNIST data module the examples use.

``WikiText2(download=True)`` and ``MNIST(..., download=True)`` fetch their files as Lightning's
do (from the same addresses) where the file is not already on disk.
"""

from trainmesh.demos.boring_classes import BoringDataModule, BoringModel, DemoModel
from trainmesh.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from trainmesh.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "LightningLSTM",
    "SequenceSampler",
    "SimpleLSTM",
    "LightningTransformer",
    "Transformer",
    "WikiText2",
    "BoringModel",
    "BoringDataModule",
    "DemoModel",
]
