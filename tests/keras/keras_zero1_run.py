"""The program of the Keras zero1 test: one launch of 2 processes fits each leg under ddp, then zero1.

python keras_zero1_run.py OUT -> every rank writes OUT/<leg>_<strategy>.rank{R} (variables, the whole
                                 optimizer state after fit, the optimizer's variable count and slot
                                 sizes seen during training); rank 0 saves OUT/zero1.keras after the
                                 zero1 Adam leg, with its predictions of held-out images.
Models and data are keras_run.py's: the class_weight classifier (SGD with momentum 0.9), the
guide's convnet without BatchNormalization/Dropout under Adam, and the classifier under AdamW
(weight decay) with an ExponentialDecay schedule, fitted twice (2 epochs, then a third).
"""

import faulthandler
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402
import torch  # noqa: E402
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


if __name__ == "__main__":
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "300")), exit=True)
    run(*sys.argv[1:])
