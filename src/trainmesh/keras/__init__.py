"""Keras 3 models (torch backend) trained by Keras' own ``fit``, in every process of a trainmesh run.

``fit``/``evaluate``/``predict`` call the model's own methods with the arguments as given, in
each process, on its share of the data; gradients are averaged and metrics summed across the
processes underneath, and the callbacks that write run on rank 0 only (Horovod's recipe).
Set ``KERAS_BACKEND=torch`` before keras is first imported. ``import trainmesh`` never imports
this package; importing it does not import keras either, until a function needs it.

>>> # import os; os.environ["KERAS_BACKEND"] = "torch"
>>> # import keras, trainmesh.keras as tk
>>> # model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
>>> # history = tk.fit(model, x, y, batch_size=32, epochs=3, strategy="ddp", devices=2)
>>> # with tk.distribute(strategy="ddp", devices=2):  # or the model's own calls, distributed
>>> #     history = model.fit(x, y, batch_size=32, epochs=3)
"""

from trainmesh.keras.distribute import distribute
from trainmesh.keras.training import evaluate, fit, predict

__all__ = ["distribute", "evaluate", "fit", "predict"]
