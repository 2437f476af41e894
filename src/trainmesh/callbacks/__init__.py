"""Callbacks the Trainer feeds: checkpoints, early stopping, learning-rate logging, progress, summary,
throughput.

None of these modules imports an optional integration (rich is imported by the progress bar
only when it draws), so importing this package stays cheap.

>>> from trainmesh.callbacks import EarlyStopping, ModelCheckpoint
>>> callbacks = [ModelCheckpoint(monitor="val_loss"), EarlyStopping(monitor="val_loss", patience=3)]
"""

from trainmesh.callbacks.base import Callback
from trainmesh.callbacks.checkpoint import Checkpoint, OnExceptionCheckpoint
from trainmesh.callbacks.device_stats_monitor import DeviceStatsMonitor
from trainmesh.callbacks.early_stopping import EarlyStopping
from trainmesh.callbacks.finders import BatchSizeFinder, LearningRateFinder
from trainmesh.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from trainmesh.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from trainmesh.callbacks.lambda_function import LambdaCallback
from trainmesh.callbacks.lightning1_names import ProgressBarBase as ProgressBarBase  # 1.9's names, not in __all__
from trainmesh.callbacks.lightning1_names import QuantizationAwareTraining as QuantizationAwareTraining
from trainmesh.callbacks.lr_monitor import LearningRateMonitor
from trainmesh.callbacks.model_checkpoint import ModelCheckpoint
from trainmesh.callbacks.model_summary import ModelSummary, RichModelSummary
from trainmesh.callbacks.prediction_writer import BasePredictionWriter
from trainmesh.callbacks.progress import ProgressBar, RichProgressBar, TQDMProgressBar
from trainmesh.callbacks.pruning import ModelPruning
from trainmesh.callbacks.spike import SpikeDetection
from trainmesh.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from trainmesh.callbacks.throughput import ThroughputMonitor
from trainmesh.callbacks.timer import Timer
from trainmesh.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelPruning",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "SpikeDetection",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "WeightAveraging",
]
