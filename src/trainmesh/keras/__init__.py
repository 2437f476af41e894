"""Keras 3 models (torch backend) trained by trainmesh: ``fit``/``evaluate``/``predict`` as in
Keras, on any data-parallel strategy, or :class:`KerasModule` to write your own steps.

Set ``KERAS_BACKEND=torch`` before keras is first imported. ``import trainmesh`` never imports
this package; importing it does not import keras either, until a function needs it.

>>> # import os; os.environ["KERAS_BACKEND"] = "torch"
>>> # import keras, trainmesh.keras as tmk
>>> # model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
>>> # history = tmk.fit(model, x, y, batch_size=32, epochs=3, strategy="ddp", devices=2)
"""

from trainmesh.keras.adapter import KerasModule
from trainmesh.keras.training import History, evaluate, fit, predict

__all__ = ["History", "KerasModule", "evaluate", "fit", "predict"]
