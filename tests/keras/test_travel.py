"""The Keras model on its way to ddp_spawn's workers (travel.Travelling), emulated in one process: the model
pickled as ddp_spawn sends it, and read back."""

import os
import pickle

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras = pytest.importorskip("keras")


class FrozenBody(keras.Model):
    """A subclassed model whose layers its __init__ makes: a freeze set after construction is in no config."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body = keras.layers.Dense(4)
        self.head = keras.layers.Dense(1)

    def call(self, x):
        return self.head(self.body(x))


class FrozenInInit(FrozenBody):
    """The same with the freeze in its __init__, which Keras' rebuild runs."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.body.trainable = False


def built(cls):
    keras.utils.set_random_seed(0)
    model = cls()
    model(np.zeros((1, 3), "float32"))
    return model


def test_a_layer_frozen_after_construction_is_refused_before_start():
    """Keras' pickle rebuilds a subclassed model by its __init__, whose layers are trainable: a body frozen by
    ``model.body.trainable = False`` arrived trainable, each ddp_spawn worker trained it (Keras' compile_from_config
    built Adam over it too), and the launching process then failed taking the workers' optimizer state (a
    ValueError out of Keras' assign, after the whole fit). Refused when the model is sent, naming the layer; a
    freeze in the class's __init__ arrives as it is, and the arrived model trains as the sender in Keras' fit."""
    from trainmesh.keras.travel import Travelling
    from trainmesh.launchers.spawn import RefusedToTravel

    sender = built(FrozenBody)
    sender.body.trainable = False
    sender.compile(optimizer="adam", loss="mse")
    with pytest.raises(
        RefusedToTravel, match="layer 'dense.*trainable=True where here it is trainable=False.*__init__"
    ):
        pickle.dumps(Travelling(sender))

    sender = built(FrozenInInit)
    sender.compile(optimizer="adam", loss="mse")
    arrived = pickle.loads(pickle.dumps(Travelling(sender))).model
    assert [layer.trainable for layer in arrived._flatten_layers()] == [True, False, True]
    x = np.random.default_rng(0).random((32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    expected = sender.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    assert arrived.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history == expected
    for mine, theirs in zip(arrived.variables, sender.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
