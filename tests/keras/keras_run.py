"""The programs of the Keras multi-process tests (trainmesh's ddp re-runs the script it is in).

python keras_run.py ddp OUT      -> one launch of 2 processes (strategy="ddp"), several fits one after
                                    another; every rank writes OUT/<leg>.rank{R} (the tests run it
                                    as a leg of keras_batch.py's launch)
python keras_run.py spawn OUT [KERAS_FILE X PRED] -> first, where given, plain Keras alone (trainmesh not
                                    yet imported): keras.saving.load_model(KERAS_FILE), its predictions
                                    of X saved to PRED; then the guide's convnet and a model of the
                                    program's own classes under ddp_spawn, the class_weight classifier
                                    under ddp_fork; the parent (the caller's process) writes
                                    OUT/<start method>_<leg>.pt

Models: the keras-io guide "Multi-GPU distributed training with PyTorch"'s convnet (``guide``:
BatchNormalization and Dropout; ``plain``: without them, so that 2 processes at batch B train what
one trains at 2B), a keras-io "structured data" style classifier trained with ``class_weight`` (and,
in the ``ema`` leg, with the optimizer's ``use_ema`` and SwapEMAWeights), and a two-headed tabular
model (``weighted``: sample_weight, weighted_metrics, loss_weights, validation_steps and
validation_batch_size, verbose=2).
Data: MNIST-shaped synthetic images in [0, 255] and a tabular set, so nothing is downloaded.
"""

import contextlib
import faulthandler
import io
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported, here and in spawned workers

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402

SEED = 0
EPOCHS = 2
BATCH = 16  # per process; the one-process reference runs at 2 * BATCH
SAMPLES = 160  # 128 to train, 32 to validate (validation_split=0.2): full global batches
CLASS_WEIGHT = {0: 1.0, 1: 4.0}


class Affine(keras.layers.Layer):
    """A program's own layer class (``__main__.Affine`` when this file runs as a script): x * scale + shift."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="shift")

    def call(self, inputs):
        return inputs * self.scale + self.shift


def own_classes_arguments(batch: int) -> tuple:
    """A program's own classes: keras_custom_steps' CustomModel (its train_step/test_step) and SquaredError
    metric (an imported module's), this file's Affine layer; the model, data and fit arguments."""
    import keras_custom_steps

    model, x, y = keras_custom_steps.custom_step(Affine, metrics=("mae", keras_custom_steps.SquaredError()))
    return model, x, y, {"batch_size": batch, "epochs": EPOCHS, "shuffle": False, "validation_split": 0.2}


def get_model(kind: str = "guide"):
    """The guide's get_model(); kind="plain" leaves out its BatchNormalization and Dropout layers."""
    import keras

    norm = kind == "guide"
    inputs = keras.Input(shape=(28, 28, 1))
    x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    x = keras.layers.Conv2D(filters=12, kernel_size=3, padding="same", use_bias=False)(x)
    if norm:
        x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(filters=24, kernel_size=6, use_bias=False, strides=2)(x)
    if norm:
        x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(filters=32, kernel_size=6, padding="same", strides=2, name="large_k")(x)
    if norm:
        x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    if norm:
        x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(10)(x)
    return keras.Model(inputs, outputs)


def get_images(n: int = SAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28, 1)).astype("float32")
    y = (x[:, :14].mean(axis=(1, 2, 3)) > x[:, 14:].mean(axis=(1, 2, 3))).astype("int64")
    return x, y * 5 + rng.integers(0, 5, size=n)


def get_tabular(n: int = SAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An imbalanced binary set (about 1 positive in 5), as the keras-io fraud/structured examples."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 12)).astype("float32")
    y = ((x[:, 0] + 0.5 * x[:, 1] + 0.3 * rng.normal(size=n)) > 0.9).astype("int64")
    return x, y


def two_heads():
    """A tabular model with a binary head and a 3-class head, the second's loss weighted 0.3."""
    import keras

    inputs = keras.Input((12,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    heads = {"a": keras.layers.Dense(1, activation="sigmoid"), "b": keras.layers.Dense(3)}
    model = keras.Model(inputs, {name: layer(hidden) for name, layer in heads.items()})
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss={"a": "binary_crossentropy", "b": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        loss_weights={"a": 1.0, "b": 0.3},
        metrics={"a": ["accuracy"], "b": ["accuracy"]},
        weighted_metrics={"a": ["accuracy"], "b": ["accuracy"]},
    )
    return model


def build(kind: str, optimizer: str):
    """The same model in every process: the same seed before building it."""
    import keras

    # variable paths restart: legs run one after another in a process
    # Keras' option for a loop of models: no gc.collect, which scans torch's whole heap (0.17 CPU-s a call)
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    if kind == "heads":
        return two_heads()
    if kind in ("classifier", "weighted_step"):
        import keras_custom_steps

        model = (keras_custom_steps.WeightedStep if kind == "weighted_step" else keras.Sequential)(
            [
                keras.Input((12,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        chosen = keras.optimizers.SGD(0.05, momentum=0.9, use_ema=optimizer == "ema")
        if optimizer == "clipped":  # clipped after the average, as one process clips its global batch's gradient
            chosen = keras.optimizers.SGD(0.5, momentum=0.9, global_clipnorm=0.05, gradient_accumulation_steps=2)
        model.compile(
            optimizer=chosen,
            loss="binary_crossentropy",
            metrics=["accuracy", keras.metrics.Precision(), keras.metrics.Recall()]
            + ([keras.metrics.AUC(), keras_custom_steps.OwnTruePositives()] if kind == "weighted_step" else []),
        )
        return model
    model = get_model(kind)
    chosen = keras.optimizers.Adam(1e-3) if optimizer == "adam" else keras.optimizers.SGD(0.1)
    model.compile(
        optimizer=chosen, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    return model


LEGS = {  # name: (model, optimizer, batch per process, extra fit arguments)
    "plain_sgd": ("plain", "sgd", {}),
    "plain_adam": ("plain", "adam", {}),
    "guide": ("guide", "adam", {}),
    "classifier": ("classifier", "sgd", {"class_weight": CLASS_WEIGHT}),
    "weighted": ("heads", "sgd", {"verbose": 2}),
    "ema": ("classifier", "ema", {}),
    "pydataset": ("classifier", "sgd", {}),  # x and validation_data: a keras.utils.PyDataset
    "loader": ("classifier", "sgd", {}),  # x and validation_data: a torch DataLoader
    # 101 samples (rank 0 51, rank 1 50: no sample repeated), validation_steps=1 of 4 validation batches
    "loader_odd": ("classifier", "sgd", {"validation_steps": 1}),
    # global_clipnorm, gradient_accumulation_steps, steps_per_epoch (3 of the 4 global batches)
    "clipped": ("classifier", "clipped", {"steps_per_epoch": 3}),
    "weighted_step": ("weighted_step", "sgd", {}),  # a train_step of its own: sample_weight, apply_gradients
}
ODD = 101  # the loader_odd leg's training samples


def batches(leg: str, x: np.ndarray, y: np.ndarray, batch: int):
    """The arrays in batches of ``batch``, unshuffled: a keras.utils.PyDataset or a torch DataLoader."""
    import keras

    if leg.startswith("loader"):
        dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=False)

    class ArrayBatches(keras.utils.PyDataset):
        def __len__(self):
            return -(-len(x) // batch)

        def __getitem__(self, index):
            return x[index * batch : (index + 1) * batch], y[index * batch : (index + 1) * batch]

    return ArrayBatches()


def fit_arguments(leg: str, batch: int) -> tuple[object, np.ndarray, np.ndarray, dict]:
    """The model, data and model.fit arguments of a leg (one process uses them at 2 * batch)."""
    import keras

    kind, optimizer, extra = LEGS[leg]
    model = build(kind, optimizer)
    x, y = get_tabular() if kind in ("classifier", "heads", "weighted_step") else get_images()
    arguments = {"batch_size": batch, "epochs": EPOCHS, "shuffle": False, "validation_split": 0.2, **extra}
    if kind == "weighted_step":
        arguments["sample_weight"] = np.linspace(0.1, 2.0, len(x)).astype("float32")
    if kind == "heads":  # validation: the first 16 of the 32 held-out samples (one step of 8 per process)
        y = {"a": y, "b": (x[:, 2] > 0).astype("int64") + (x[:, 3] > 1).astype("int64")}
        arguments.update(validation_steps=1, validation_batch_size=batch // 2)
        arguments["sample_weight"] = np.linspace(0.1, 2.0, len(x)).astype("float32")
    if leg in ("pydataset", "loader", "loader_odd"):  # 128 to train (8 batches of 16, 4 of 32), 32 to validate
        split = int(len(x) * 0.8)
        del arguments["batch_size"], arguments["validation_split"]  # shuffle=False: the batches in order
        held = batch // 2 if leg == "loader_odd" else batch  # loader_odd: 4 validation batches, one per epoch
        arguments["validation_data"] = batches(leg, x[split:], y[split:], held)
        end = ODD if leg == "loader_odd" else split
        x, y = batches(leg, x[:end], y[:end], batch), None
    if optimizer == "ema":  # validation and the final weights: the optimizer's moving averages
        arguments["callbacks"] = [keras.callbacks.SwapEMAWeights(swap_on_epoch=True)]
    return model, x, y, arguments


def variables(model) -> dict[str, np.ndarray]:
    return {v.path: np.array(v.numpy()) for v in model.variables}


def run_ddp(out: str) -> None:
    import keras
    import trainmesh as tm
    import trainmesh.keras as tk

    rank = int(os.environ.get("RANK", "0"))
    torch.save(shuffled_loader_samples(), os.path.join(out, f"shuffled.rank{rank}"))
    torch.save(shuffled_loader_samples(arrays=True), os.path.join(out, f"shuffled_arrays.rank{rank}"))
    torch.save(torch_optimizer_step(), os.path.join(out, f"torch_optimizer.rank{rank}"))
    distributed_block(out, rank)
    for leg in LEGS:
        model, x, y, arguments = fit_arguments(leg, BATCH)
        callbacks = arguments.pop("callbacks", [])
        if leg == "guide":  # the writing callbacks, given a folder of each rank's own: only rank 0's gets files
            folder = os.path.join(out, f"files.rank{rank}")
            os.makedirs(folder, exist_ok=True)  # CSVLogger, as in Keras, does not make its folder
            callbacks += [
                keras.callbacks.ModelCheckpoint(os.path.join(folder, "best.keras"), save_best_only=True),
                keras.callbacks.CSVLogger(os.path.join(folder, "log.csv")),
                keras.callbacks.EarlyStopping(monitor="val_loss", patience=5),
            ]
        arguments.setdefault("verbose", 0)
        with contextlib.redirect_stdout(io.StringIO()) as printed:  # Keras' progress lines, each rank's own
            history = tk.fit(model, x, y, strategy="ddp", devices=2, callbacks=callbacks, **arguments)
        record = {"variables": variables(model), "history": history.history, "params": dict(history.params)}
        if leg in ("pydataset", "loader"):  # tk.evaluate and tk.predict of the trained model on the validation batches
            validation = arguments["validation_data"]
            record["evaluate"] = tk.evaluate(model, validation, strategy="ddp", devices=2, verbose=0, return_dict=True)
            try:
                record["predict"] = tk.predict(model, validation, strategy="ddp", devices=2, verbose=0)
            except (TypeError, ValueError) as refused:  # the same on both ranks: the other legs still run
                record["predict"] = refused
        if leg == "loader_odd":  # steps=1 of 4 batches of 8 each: the first 16 samples, as one process at 16
            record.update(steps_evaluated_predicted(model, arguments["validation_data"]))
        torch.save({**record, "stdout": printed.getvalue()}, os.path.join(out, f"{leg}.rank{rank}"))
        if leg == "guide":  # docs/how-to/keras.md's way: every rank calls it, rank 0 writes the one file
            tm.rank_zero_only(model.save)(os.path.join(out, "guide.keras"))
        if leg == "guide" and rank == 0:
            held_out, _ = get_images(32, seed=1)
            np.save(os.path.join(out, "held_out.npy"), held_out)
            np.save(os.path.join(out, "held_out_pred.npy"), model.predict(held_out, verbose=0))


def steps_evaluated_predicted(model, validation) -> dict:
    """tk.evaluate and tk.predict with steps=1 of the validation DataLoader, and tk.predict with steps=1 of
    the same samples in a PyDataset (under 2 processes: both ranks' first batch)."""
    import trainmesh.keras as tk

    x, y = get_tabular()
    launch = {"strategy": "ddp", "devices": 2, "verbose": 0, "steps": 1}
    return {
        "evaluate_steps": tk.evaluate(model, validation, return_dict=True, **launch),
        "predict_steps": tk.predict(model, validation, **launch),
        "predict_pydataset_steps": tk.predict(model, batches("pydataset", x[128:], y[128:], BATCH // 2), **launch),
    }


def distributed_block(out: str, rank: int) -> None:
    """The classifier leg again, through the model's own calls in a ``with tk.distribute(...)`` block."""
    import trainmesh.keras as tk

    model, x, y, arguments = fit_arguments("classifier", BATCH)
    with tk.distribute(strategy="ddp", devices=2):
        history = model.fit(x, y, verbose=0, **arguments)
        evaluated = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    record = {"variables": variables(model), "history": history.history, "evaluate": evaluated}
    torch.save(record, os.path.join(out, f"distribute.rank{rank}"))


def torch_optimizer_step() -> dict:
    """Fits of keras_custom_steps.TorchOptimizerStep (a torch optimizer in its train_step, 4 steps of 8 per
    process) and SecondOptimizerStep (an optimizer of its own overriding apply, given torch.autograd.grad's
    gradients): their errors, and how many steps the torch optimizer took; the weights of clipping_fit."""
    import keras_custom_steps

    import trainmesh.keras as tk

    errors = []
    x, y = get_tabular(64)
    for cls in (keras_custom_steps.TorchOptimizerStep, keras_custom_steps.SecondOptimizerStep):
        keras.backend.clear_session(free_memory=False)  # no gc.collect (it scans torch's whole heap)
        keras.utils.set_random_seed(SEED)
        model = cls([keras.Input((12,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        try:
            tk.fit(model, x, y.astype("float32"), batch_size=8, epochs=1, verbose=0, strategy="ddp", devices=2)
            errors.append(None)
        except (RuntimeError, ValueError) as refused:
            errors.append(str(refused))
    return {
        "error": errors[0],
        "own_apply_error": errors[1],
        "steps": keras_custom_steps.TORCH_STEPS[0],
        "clipping": clipping_fit(x, y.astype("float32"), batch=8, strategy="ddp", devices=2),
    }


def clipping_fit(x, y, *, batch: int, **launch) -> list[np.ndarray]:
    """The weights of a model compiled with ClippingSGD (its apply clips) after Keras' own train_step at
    ``batch`` (tk.fit with ``launch``, or Keras' own fit without)."""
    import keras_custom_steps

    import trainmesh.keras as tk

    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(SEED)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras_custom_steps.ClippingSGD(0.1), loss="mse")
    arguments = {"batch_size": batch, "epochs": 1, "verbose": 0, "shuffle": False}
    if launch:
        tk.fit(model, x, y, **arguments, **launch)
    else:
        model.fit(x, y, **arguments)
    return [np.array(v.numpy()) for v in model.weights]


def shuffled_loader_samples(arrays: bool = False) -> list[list[int]]:
    """The samples each epoch of a fit on a DataLoader(shuffle=True) (``arrays``: on the arrays with
    shuffle=True) gave this process (2 epochs of 32 samples numbered 0..31, over the 2 processes)."""
    import keras
    import trainmesh.keras as tk

    seen: list[list[int]] = [[], []]
    keras.backend.clear_session(free_memory=False)  # as build()
    keras.utils.set_random_seed(SEED)

    class Record(keras.layers.Layer):  # the sample numbers of each training batch, in the epoch it came
        def call(self, inputs, training=False):
            if training and epoch[0] is not None:  # not step_probe's calls as training begins (own_forward.py)
                seen[epoch[0]].extend(int(v) for v in inputs.detach().cpu().numpy().ravel())
            return inputs

    epoch: list[int | None] = [None]
    model = keras.Sequential([keras.Input((1,)), Record(), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    numbers = torch.arange(32, dtype=torch.float32).reshape(32, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(numbers, numbers), batch_size=4, shuffle=True)
    count = keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs=None: epoch.__setitem__(0, e))
    data = {"x": numbers.numpy(), "y": numbers.numpy(), "batch_size": 4, "shuffle": True} if arrays else {"x": loader}
    tk.fit(model, **data, epochs=2, verbose=0, callbacks=[count], strategy="ddp", devices=2)
    return seen


# ddp_spawn's classifier leg became own_classes (a launch each: the suite keeps its three)
SPAWN_LEGS = (("spawn", "guide"), ("fork", "classifier"), ("spawn", "own_classes"))


def run_spawn(out: str, *load: str) -> None:
    if load:  # this process's first work, before it imports trainmesh (a process of its own cost 5 CPU-s)
        run_load(*load)
    import trainmesh.keras as tk

    for start, leg in SPAWN_LEGS:
        model, x, y, arguments = own_classes_arguments(BATCH) if leg == "own_classes" else fit_arguments(leg, BATCH)
        history = tk.fit(model, x, y, strategy=f"ddp_{start}", devices=2, verbose=0, **arguments)
        torch.save({"variables": variables(model), "history": history.history}, os.path.join(out, f"{start}_{leg}.pt"))


def run_load(keras_file: str, x_file: str, out: str) -> None:
    import keras

    assert not [name for name in sys.modules if name.split(".")[0] == "trainmesh"], "not plain Keras"
    model = keras.saving.load_model(keras_file)
    np.save(out, np.asarray(model.predict(np.load(x_file), verbose=0)))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    {"ddp": run_ddp, "spawn": run_spawn}[sys.argv[1]](*sys.argv[2:])
