"""Bundled data modules: digits (scikit-learn, no download), MNIST (local IDX files), synthetic.

scikit-learn is imported only inside ``DigitsDataModule.setup``, so importing this package
stays cheap.

>>> from trainmesh.data import SyntheticDataModule
>>> SyntheticDataModule(num_samples=32, num_features=4).num_classes
10
"""

from trainmesh.data.digits import DigitsDataModule
from trainmesh.data.mnist import MNISTDataModule
from trainmesh.data.synthetic import SyntheticDataModule, make_classification_tensors

__all__ = ["DigitsDataModule", "MNISTDataModule", "SyntheticDataModule", "make_classification_tensors"]
