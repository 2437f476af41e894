"""Leg: an optimizer built (and stepped once) before Runtime(strategy="fsdp").setup.

python rebind_run.py OUT -> rank 0 saves what the rebound optimizer holds, and what it should.
"""

import faulthandler
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))


def stepped_once(net):
    """Two groups with their own learning rates, and Adam state from one step."""
    optimizer = torch.optim.Adam(
        [{"params": net[0].parameters(), "lr": 0.1}, {"params": net[2].parameters(), "lr": 0.01, "betas": (0.8, 0.9)}]
    )
    net(torch.ones(3, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return optimizer


def main(out):
    faulthandler.dump_traceback_later(100, exit=True)
    runtime = tm.Runtime(accelerator="cpu", strategy="fsdp", devices=2)

    def check():
        net = model()
        optimizer = stepped_once(net)
        whole_state = {
            name: {k: v.clone() for k, v in optimizer.state[p].items()} for name, p in net.named_parameters()
        }
        placed, rebound = runtime.setup(net, optimizer)
        params_now = dict(net.named_parameters())
        in_optimizer = [p for group in rebound.param_groups for p in group["params"]]
        report = {
            "all_rebound": all(any(p is q for q in params_now.values()) for p in in_optimizer),
            "count": len(in_optimizer),
            "groups": [(g["lr"], g["betas"]) for g in rebound.param_groups],
            # Each rank's shard of the moments equals its piece of the whole moment it had.
            "moments_match": all(
                torch.equal(rebound.state[params_now[name]][key].full_tensor(), value)
                for name, state in whole_state.items()
                for key, value in state.items()
                if value.dim() > 0
            ),
            "steps_kept": all(float(rebound.state[params_now[n]]["step"]) == 1.0 for n in whole_state),
        }
        loss = placed(torch.ones(3, 8)).sum()
        runtime.backward(loss)
        before = {n: p.full_tensor().clone() for n, p in params_now.items()}
        rebound.step()
        report["trained"] = all(not torch.equal(before[n], p.full_tensor()) for n, p in params_now.items())
        if runtime.is_global_zero:
            torch.save(report, out)

    runtime.launch(check)


if __name__ == "__main__":
    main(sys.argv[1])
