"""Legs of the Keras ddp tests, each run as its own program (trainmesh's ddp re-runs the script it is in).

The model is the keras-io guide's convnet (seed 004_*, "distributed_training_with_torch"), on
synthetic 28x28x1 images in [0, 255] so no data set is downloaded.

python keras_run.py handwritten OUT [BATCH]     -> the guide's own loop: mp.spawn, gloo, DistributedSampler
                                                   (shuffle=False), DDP, torch Adam, CrossEntropyLoss; every
                                                   rank writes OUT.rank{R}
python keras_run.py fit OUT MODEL DEVICES BATCH [OPT [STRATEGY]]  (STRATEGY: ddp by default, or zero1)
                                                -> trainmesh.keras.fit (ddp when DEVICES > 1), the model compiled
                                                   with keras.optimizers.Adam(1e-3) (OPT adam, the default) or
                                                   SGD(0.1) (OPT sgd); every rank writes OUT.rank{R}; rank 0
                                                   also saves OUT.keras, held-out images (OUT.x.npy) and the
                                                   trained model's predictions on them (OUT.pred.npy)
python keras_run.py load KERAS_FILE X OUT       -> plain Keras alone: keras.saving.load_model, predict X
python keras_run.py --batch SPEC.json           -> several fit legs of one world size in one launch, one
                                                   after another (see tests/helpers/batches.py)

MODEL is "guide" (the guide's convnet: BatchNormalization and Dropout) or "plain" (the same
convnet without BatchNormalization and Dropout; see test_keras_ddp.py for why).
Each OUT.rank{R} is a torch file {"variables": {path: tensor}, "rank": R, "world_size": W}
holding every Keras variable of the model: kernels, biases, BN moving statistics, seed states.
"""

import faulthandler
import os
import sys
from datetime import timedelta

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported, here and in spawned workers

import numpy as np  # noqa: E402
import torch  # noqa: E402

SEED = 0
EPOCHS = 2
LR = 1e-3  # the guide's learning rate (Adam)
SGD_LR = 0.1
SAMPLES = 128  # divisible by 2 x the per-rank batch: no padded or ragged batch on either side


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


def get_data(n: int = SAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-shaped images (float32 in [0, 255], as the guide's get_dataset) and int64 labels."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28, 1)).astype("float32")
    y = (x[:, :14].mean(axis=(1, 2, 3)) > x[:, 14:].mean(axis=(1, 2, 3))).astype("int64")
    y = y * 5 + rng.integers(0, 5, size=n)  # ten classes, half of the signal learnable
    return x, y


def build(kind: str):
    """Every process builds the same model: the same seed before get_model on every rank."""
    import keras

    # Layer names restart (variable paths are compared across processes) when several legs run in
    # one process (--batch); a fresh process starts this way anyway.
    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    return get_model(kind)


def variables(model) -> dict[str, torch.Tensor]:
    found = {v.path: v.value.detach().clone().cpu() for v in model.variables}
    assert len(found) == len(model.variables), "two Keras variables share a path"
    return found


def save_rank(out: str, model, rank: int, world: int, **extra) -> None:
    torch.save({"variables": variables(model), "rank": rank, "world_size": world, **extra}, f"{out}.rank{rank}")


# ---- the guide's own loop --------------------------------------------------------------------------


def handwritten_worker(rank: int, out: str, port: int, batch: int) -> None:
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where it hangs, then ends
    world = 2
    dist = torch.distributed
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    x, y = get_data()
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    model = build("guide")
    # What fit(seed=SEED) does before its first step: the seed again, after the model is built
    # (the guide's Dropout has no seed of its own and draws from torch's global generator).
    import keras

    keras.utils.set_random_seed(SEED)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch, shuffle=False)
    # The compiled model's hyperparameters: keras.optimizers.Adam(LR) has epsilon 1e-7, torch's 1e-8.
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    for _epoch in range(EPOCHS):
        for inputs, targets in loader:
            # training=True: the guide calls model(inputs), which in Keras 3 runs BatchNormalization
            # and Dropout in inference mode (model.train() does not change that).
            outputs = ddp_model(inputs, training=True)
            loss = loss_fn(outputs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    save_rank(out, model, rank, world)
    dist.barrier()  # leave together: gloo can abort a rank that exits while its peer still talks
    dist.destroy_process_group()


# ---- trainmesh ------------------------------------------------------------------------------------


def run_fit(out: str, kind: str, devices: int, batch: int, optimizer: str = "adam", strategy: str = "ddp") -> None:
    import keras
    import trainmesh.keras as tk

    model = build(kind)
    chosen = keras.optimizers.Adam(LR) if optimizer == "adam" else keras.optimizers.SGD(SGD_LR)
    model.compile(optimizer=chosen, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = get_data()
    initial = variables(model)
    history = tk.fit(
        model,
        x,
        y,
        batch_size=batch,
        epochs=EPOCHS,
        shuffle=False,
        seed=SEED,
        strategy=strategy if devices > 1 else "auto",
        devices=devices,
        verbose=False,
    )
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gathered = None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        # The moving statistics of every rank, gathered here (when fit leaves its group up).
        stats = {k: v for k, v in variables(model).items() if "moving_" in k}
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, stats)
        gathered = everyone
    save_rank(
        out, model, rank, world, history=dict(getattr(history, "history", {}) or {}), gathered=gathered, initial=initial
    )
    if rank == 0:
        held_out, _ = get_data(64, seed=1)
        model.save(f"{out}.keras")
        np.save(f"{out}.x.npy", held_out)
        np.save(f"{out}.pred.npy", np.asarray(model.predict(held_out, batch_size=32, verbose=0)))
        direct = model(torch.from_numpy(held_out), training=False).detach().cpu().numpy()
        np.save(f"{out}.direct.npy", direct)


def run_load(keras_file: str, x_file: str, out: str) -> None:
    import keras

    model = keras.saving.load_model(keras_file)
    np.save(out, np.asarray(model.predict(np.load(x_file), batch_size=32, verbose=0)))


def run_handwritten(out: str, batch: str = "16") -> None:
    """handwritten OUT [BATCH]: the guide's own loop, in two spawned processes."""
    from trainmesh.launchers.environments import find_free_port

    torch.multiprocessing.spawn(handwritten_worker, args=(out, find_free_port(), int(batch)), nprocs=2)


def run_fit_leg(out: str, kind: str, devices: str, batch: str, *rest: str) -> None:
    """fit OUT MODEL DEVICES BATCH [OPT [STRATEGY]]: trainmesh.keras.fit."""
    run_fit(out, kind, int(devices), int(batch), *rest[:2])


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"handwritten": run_handwritten, "fit": run_fit_leg, "load": run_load}


def run_mode(argv: list[str]) -> None:
    """One leg: ``argv`` is the command line after the program (NAME ARGS..., NAME a key of PROGRAMS)."""
    name = argv[0]
    if name not in PROGRAMS:
        raise SystemExit(f"unknown leg {name!r}")
    PROGRAMS[name](*argv[1:])


if __name__ == "__main__":
    watchdog = int(os.environ.get("LEG_WATCHDOG_S", "120"))
    if sys.argv[1] == "--batch":  # several fit legs of one world size in one launch (tests/helpers/batches.py)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from helpers.batches import run_batch

        run_batch(sys.argv[2], run_mode, limit=watchdog)
    else:
        faulthandler.dump_traceback_later(watchdog, exit=True)
        run_mode(sys.argv[1:])
