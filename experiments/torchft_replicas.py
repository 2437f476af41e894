"""What torchft 0.2.0 does on torch 2.13.0 CPU: 2 replica groups of 1 process, one killed and restarted.

Run (a venv holding torch==2.13.0 and torchft==0.2.0):  python experiments/torchft_replicas.py
torch only, no trainmesh. The parent starts torchft's Lighthouse on 127.0.0.1 (min_replicas=1);
each replica group is one spawned process with its own TCPStore, a torchft Manager, torchft's
ProcessGroupGloo, torchft.DistributedDataParallel and torchft.Optimizer (Adam). Replica 1 kills
itself (os._exit) at step KILL_AT; the parent starts it again; it heals from replica 0 (weights +
Adam state over torchft's HTTP checkpoint transport) and both run to step STEPS. Replica 0 keeps
training without a restart; it does not finish before it has trained 3 steps with 2 participants again.
Prints per-step participants, and checks that both replicas end with identical weights and Adam state.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.multiprocessing as mp

STEPS, KILL_AT = 30, 4


def replica(replica_id: int, attempt: int, lighthouse: str, out: "mp.Queue", up: "mp.Barrier", back: "mp.Event") -> None:
    import torch.distributed as dist
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    adam = torch.optim.Adam(model.parameters(), lr=1e-2)

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": adam.state_dict()}

    def load_state_dict(sd: dict) -> None:
        model.load_state_dict(sd["model"])
        adam.load_state_dict(sd["optim"])

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=1,
        replica_id=f"replica{replica_id}",
        lighthouse_addr=lighthouse,
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        hostname="127.0.0.1",
        timeout=timedelta(seconds=10),
        quorum_timeout=timedelta(seconds=30),
        connect_timeout=timedelta(seconds=10),
    )
    ddp = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, adam)
    # Both Managers heartbeat before either asks for a quorum, so the lighthouse waits for both at
    # step 0 (join_timeout_ms) instead of letting the first one train alone.
    if attempt == 0:
        up.wait()
    else:
        back.set()
    cpu0 = time.process_time()
    while manager.current_step() < STEPS:
        step = manager.current_step()
        g = torch.Generator().manual_seed(1000 * replica_id + step)
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
        opt.zero_grad()  # starts the quorum (async) for this step
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # the comm hook all-reduces over the replicas in the quorum
        opt.step()  # should_commit; Adam steps only when every participant succeeded
        n = manager.num_participants()
        if replica_id == 0 and manager.current_step() == KILL_AT + 3:
            back.wait()  # the survivor waits for the restarted replica's Manager to be up ...
        if replica_id == 0 and n == 1 and back.is_set():
            time.sleep(0.05)  # ... and paces its steps until it has joined (not needed in a real run)
        out.put((replica_id, attempt, step, manager.current_step(), n, manager.errored() is not None))
        if replica_id == 1 and attempt == 0 and manager.current_step() == KILL_AT:
            os._exit(3)  # a hard crash: no shutdown, no goodbye to the lighthouse
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    moments = torch.cat([s["exp_avg"].flatten() for s in adam.state.values()])
    # plain lists: a tensor crosses a Queue as a shared-memory handle that dies with this process
    out.put(("done", replica_id, flat.tolist(), moments.tolist(), manager.current_step(), time.process_time() - cpu0))
    # the peer may still need us as a recovery source; linger until the parent says so
    manager.shutdown(wait=False)


def main() -> None:
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=2000)
    addr = lighthouse.address()
    print("lighthouse at", addr, flush=True)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    up, back = ctx.Barrier(2), ctx.Event()
    procs = {r: ctx.Process(target=replica, args=(r, 0, addr, q, up, back)) for r in (0, 1)}
    for p in procs.values():
        p.start()
    done: dict[int, tuple] = {}
    restarted = False
    t0 = time.time()
    while len(done) < 2 and time.time() - t0 < 60:
        try:
            msg = q.get(timeout=1)
        except Exception:
            msg = None
        if msg and msg[0] == "done":
            done[msg[1]] = msg[2:]
        elif msg:
            r, attempt, step, after, n, err = msg
            print(f"{time.time() - t0:6.2f}s replica {r} attempt {attempt} step {step}->{after} participants {n} errored {err}", flush=True)
        if not restarted and not procs[1].is_alive():
            print(f"{time.time() - t0:6.2f}s replica 1 died (exit {procs[1].exitcode}); starting it again", flush=True)
            procs[1] = ctx.Process(target=replica, args=(1, 1, addr, q, up, back))
            procs[1].start()
            restarted = True
    for p in procs.values():
        p.join(timeout=30)
    lighthouse.shutdown()
    (w0, m0, s0, c0), (w1, m1, s1, c1) = done[0], done[1]
    print("final steps", s0, s1, "cpu s", round(c0, 2), round(c1, 2))
    print("weights identical:", w0 == w1, "adam exp_avg identical:", m0 == m1)
    sys.exit(0 if w0 == w1 and m0 == m1 else 1)


if __name__ == "__main__":
    main()
