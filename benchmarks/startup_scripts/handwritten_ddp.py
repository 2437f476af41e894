"""The hand-written reference for benchmarks/startup.py: the seed MLP under DDP, started by torchrun.

Each process marks its phases (startup_common.mark).
"""

from startup_common import BATCH, STEPS, generated_data, mark

mark("start")  # the first line of user code

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

mark("imported")
x, y = generated_data()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
mark("built")
dist.init_process_group("gloo")
model = DistributedDataParallel(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
sampler = DistributedSampler(TensorDataset(x, y), shuffle=False)
loader = DataLoader(TensorDataset(x, y), sampler=sampler, batch_size=BATCH)
mark("set_up")
for step, (inputs, targets) in enumerate(loader):
    if step == 0:
        mark("first_step")
    if step == STEPS:
        break
    loss = F.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
mark("trained")
dist.destroy_process_group()
mark("end")
