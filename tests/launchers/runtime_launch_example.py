"""A loop of your own on 2 processes: runtime.launch(train) starts them and runs train in each."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


def train(runtime: tm.Runtime) -> None:
    torch.manual_seed(0)  # the same data and initial weights in every process
    x = torch.randn(1024, 16)
    y = (x[:, 0] + x[:, 1] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = runtime.setup(model, optimizer)  # DDP: gradients averaged in backward
    loader = runtime.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    for epoch in range(3):
        loader.set_epoch(epoch)  # a new shuffle each epoch, the same in every process
        for xb, yb in loader:  # each process gets its half of the data
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            runtime.backward(loss)
            optimizer.step()
        mean_loss = runtime.all_reduce(loss.detach())  # the mean over the processes
        if runtime.is_global_zero:
            print(f"epoch {epoch}: loss {mean_loss.item():.4f}", flush=True)
    runtime.save("model.pt", {"model": model, "optimizer": optimizer})  # written by rank 0


if __name__ == "__main__":
    runtime = tm.Runtime(accelerator="cpu", strategy="ddp", devices=2)
    runtime.launch(train, runtime)  # "ddp" runs this script again, once per device
