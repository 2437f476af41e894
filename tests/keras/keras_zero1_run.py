"""The program of the Keras zero1 test: one launch of 2 processes fits each leg under ddp, then zero1.

python keras_zero1_run.py OUT -> every rank writes OUT/<leg>_<strategy>.rank{R} (variables, the whole
                                 optimizer state after fit, the optimizer's variable count and slot
                                 sizes seen during training); rank 0 saves OUT/zero1.keras after the
                                 zero1 Adam leg, with its predictions of held-out images.
Models and data are keras_run.py's: the class_weight classifier (SGD with momentum 0.9), the
guide's convnet without BatchNormalization/Dropout under Adam, and the classifier under AdamW
(weight decay) with an ExponentialDecay schedule, fitted twice (2 epochs, then a third). Then
keras_custom_steps.py's GAN (its train_step applies its own d_optimizer and g_optimizer), its
random draws fed with the data ("gan") and drawn in train_step as the guide does ("gan_drawn"),
under ddp in a ``with tk.distribute(...)`` block and under zero1 through tk.fit: OUT/<gan leg>_<strategy>.rank{R}.
"""

import faulthandler
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
from keras_custom_steps import gan  # noqa: E402
from keras_run import BATCH, fit_arguments, get_images, variables  # noqa: E402

LEGS = ("classifier", "plain_adam", "classifier_adamw")


def leg_arguments(leg: str):
    """keras_run's leg; "classifier_adamw": the classifier under AdamW (weight decay) with a schedule."""
    import keras

    if leg != "classifier_adamw":
        return fit_arguments(leg, BATCH)
    model, x, y, arguments = fit_arguments("classifier", BATCH)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=3, decay_rate=0.5)
    model.compile(optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.1), loss="binary_crossentropy")
    return model, x, y, arguments


def optimizer_sizes(model) -> tuple[int, int]:
    """How many variables the optimizer holds, and their elements in all."""
    held = model.optimizer.variables
    return len(held), sum(int(np.prod(v.shape)) for v in held)


def run(out: str) -> None:
    import keras
    import trainmesh.keras as tk

    rank = int(os.environ.get("RANK", "0"))
    for leg in LEGS:
        for strategy in ("ddp", "zero1"):
            model, x, y, arguments = leg_arguments(leg)
            seen: list[tuple[int, int]] = []
            watch = keras.callbacks.LambdaCallback(
                on_epoch_end=lambda epoch, logs, seen=seen, model=model: seen.append(optimizer_sizes(model))
            )
            history = tk.fit(model, x, y, strategy=strategy, devices=2, verbose=0, callbacks=[watch], **arguments)
            if leg == "classifier_adamw":  # a second fit continues the first (the gathered state split again)
                arguments.update(initial_epoch=arguments["epochs"], epochs=arguments["epochs"] + 1)
                history = tk.fit(model, x, y, strategy=strategy, devices=2, verbose=0, callbacks=[watch], **arguments)
            record = {
                "variables": variables(model),
                "optimizer": [np.array(v.numpy()) for v in model.optimizer.variables],
                "during": seen,
                "after": optimizer_sizes(model),
                "iterations": int(model.optimizer.iterations.numpy()),
                "history": history.history,
            }
            torch.save(record, os.path.join(out, f"{leg}_{strategy}.rank{rank}"))
            if strategy == "zero1" and leg == "plain_adam" and rank == 0:
                held_out, _ = get_images(32, seed=1)
                model.save(os.path.join(out, "zero1.keras"))
                np.save(os.path.join(out, "held_out.npy"), held_out)
                np.save(os.path.join(out, "held_out_pred.npy"), model.predict(held_out, verbose=0))
    run_rank_0_saver(out, rank)
    run_gans(out, rank)


def run_rank_0_saver(out: str, rank: int) -> None:
    """torchrun's pattern: only rank 0 passes a ModelCheckpoint (saving every 2 batches) to zero1's fit
    (before: rank 0 alone gathered the optimizer state for it, and waited forever)."""
    import keras
    import trainmesh.keras as tk

    model, x, y, arguments = leg_arguments("classifier")
    path = os.path.join(out, "rank0_saver.keras")
    saver = [keras.callbacks.ModelCheckpoint(path, save_freq=2)] if rank == 0 else []
    history = tk.fit(model, x, y, strategy="zero1", devices=2, verbose=0, callbacks=saver, **arguments)
    record = {"variables": variables(model), "history": history.history}
    torch.save(record, os.path.join(out, f"rank0_saver.rank{rank}"))


def optimizer_state(optimizer) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in optimizer.variables]


def fit_gan(fed: bool, strategy: str) -> dict:
    """The GAN's fit at 2 processes; its weights, both optimizers' states and History afterwards."""
    import trainmesh.keras as tk

    model, x = gan(fed)
    arguments = {"batch_size": BATCH, "epochs": 2, "shuffle": False, "verbose": 0}
    if strategy == "ddp":
        with tk.distribute(strategy="ddp", devices=2):
            history = model.fit(x, **arguments)
    else:
        history = tk.fit(model, x, strategy=strategy, devices=2, **arguments)
    return {
        "variables": variables(model),
        "d_optimizer": optimizer_state(model.d_optimizer),
        "g_optimizer": optimizer_state(model.g_optimizer),
        "history": history.history,
    }


def run_gans(out: str, rank: int) -> None:
    for leg, fed in (("gan", True), ("gan_drawn", False)):
        for strategy in ("ddp", "zero1"):
            torch.save(fit_gan(fed, strategy), os.path.join(out, f"{leg}_{strategy}.rank{rank}"))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    run(*sys.argv[1:])
