"""A loop of the user's own (Runtime) over a 2-stage pipeline, and the same loop on one process.

python pipeline_user_loop_run.py OUT pp|single
Rank 0 writes OUT: the whole model's weights and the predictions on 40 held-out samples.
"""

import faulthandler
import sys

import torch
from model_parallel_run import GLOBAL_BATCH, Net, dataset
from torch.utils.data import DataLoader

import trainmesh as tm
from trainmesh.strategies import ModelParallelStrategy


def train(runtime: tm.Runtime, out: str) -> None:
    model = runtime.setup(Net())
    (optimizer,) = runtime.setup_optimizers(torch.optim.Adam(model.parameters(), lr=1e-2))
    loader = runtime.setup_dataloaders(DataLoader(dataset(), batch_size=GLOBAL_BATCH))
    for _ in range(2):
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            runtime.train_step(model, batch, i)  # under the pipeline: the schedule's forward and backward
            optimizer.step()
    held_out = runtime.setup_dataloaders(DataLoader(dataset(40, seed=1), batch_size=GLOBAL_BATCH), train=False)
    with torch.no_grad():
        predictions = torch.cat(
            [runtime.eval_step(model, "predict_step", batch, i) for i, batch in enumerate(held_out)]
        )
    whole = runtime.state_dicts(model, [], sharded=False)["model"]
    if runtime.is_global_zero:
        torch.save(
            {"state_dict": {k: v.detach().cpu() for k, v in whole.items()}, "predictions": predictions.cpu()}, out
        )


if __name__ == "__main__":
    faulthandler.dump_traceback_later(200, exit=True)
    out, layout = sys.argv[1], sys.argv[2]
    if layout == "pp":
        runtime = tm.Runtime(
            accelerator="cpu", devices=2, strategy=ModelParallelStrategy(pp=2, dp_shard=1, microbatches=4)
        )
    else:
        runtime = tm.Runtime(accelerator="cpu", devices=1)
    runtime.launch(train, runtime, out)
