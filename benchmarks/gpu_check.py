"""The GPU check: what trainmesh does on one CUDA device, as one markdown table, in under 8 minutes.

    python benchmarks/gpu_check.py [--out gpu_check.md] [--repeats 2]
    python benchmarks/gpu_check.py --dry-run          # the same code paths on the CPU, tiny sizes

What it measures, each variant in its own fresh process (so that the allocator, cuDNN/TF32
settings and compiled caches of one variant cannot help or hurt another), variants alternating:

- the CUDA-marked tests of the suite (``pytest -m cuda``): passed / failed / skipped;
- the Trainer's step against a raw PyTorch loop on a small GPT, in bf16-mixed and 32-true:
  the mean step time over the timed steps (synchronised at both ends), wall and CPU time;
- ``Trainer(compile=True)`` against eager, bf16-mixed: the mean step after compilation;
- the ThroughputMonitor's FLOPs per batch against a hand count of the same GPT, and its MFU;
- ``estimate_memory``'s peak against ``torch.cuda.max_memory_allocated`` after three steps;
- ``trainmesh scale`` on one device (the demo model), its step time and verdict.

``--dry-run`` runs all of it on the CPU with tiny sizes: the CUDA tests are collected and
skipped, timings are CPU timings, the compiled variant compiles with ``aot_eager`` (DRY_COMPILE),
and the variants share one fresh process (a process each costs 3 CPU-s of imports for a second
of work; isolation matters only to timings). The suite
runs it (tests/test_gpu_check.py) so that the script cannot rot between GPU sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sizes:
    vocab: int
    width: int
    layers: int
    heads: int
    seq: int
    batch: int
    steps: int
    warmup: int


GPU_SIZES = Sizes(vocab=8192, width=768, layers=6, heads=12, seq=512, batch=16, steps=60, warmup=15)
# One layer: inductor's compilation costs about 12 CPU-s a layer with a cold cache; a step, 3 ms.
# Two timed steps after one: a row's wiring needs one timed step; each step costs up to 0.23 CPU-s
# on the CPU (bf16 autocast), and the six variants' steps were 4 of the dry run's 30 CPU-s at 6 + 2.
DRY_SIZES = Sizes(vocab=128, width=32, layers=1, heads=2, seq=16, batch=4, steps=2, warmup=1)
# The dry run's Trainer(compile=...): dynamo traces the forward and AOT autograd splits forward
# from backward as under inductor, without inductor's code generation: on the CPU that is C++
# kernels built by the compiler, 35 CPU-s with a cold cache (a fresh clone's CI) for a path the GPU
# never takes (it generates Triton kernels). Inductor's CPU run against eager is
# tests/strategies/test_compile.py::test_inductor_matches_eager's check.
DRY_COMPILE = {"backend": "aot_eager"}


# ---- the model, the data and the hand count (imported in the variant processes only) ------------
def build_gpt(sizes: Sizes):
    import torch
    from torch import nn

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(sizes.vocab, sizes.width)
            self.position = nn.Parameter(torch.zeros(sizes.seq, sizes.width))
            layer = nn.TransformerEncoderLayer(
                sizes.width, sizes.heads, 4 * sizes.width, dropout=0.0, batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, sizes.layers, enable_nested_tensor=False)
            self.head = nn.Linear(sizes.width, sizes.vocab, bias=False)
            self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(sizes.seq), persistent=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens) + self.position[: tokens.shape[1]]
            return self.head(self.blocks(h, mask=self.causal, is_causal=True))

    return GPT()


def hand_flops_per_batch(sizes: Sizes) -> int:
    """Forward + backward FLOPs of the GPT's matrix products: 3x the forward (backward is 2x).

    Per layer the weights of the attention projections (4 w^2) and the MLP (8 w^2) each cost 2
    FLOPs per token; the attention scores and their use of the values cost 2 * 2 * T^2 * w per
    sequence (counted whole: the causal mask does not halve what the kernel is charged for); the
    head costs 2 * w * vocab per token. Embedding look-ups, norms and softmax are not counted.
    """
    tokens = sizes.batch * sizes.seq
    per_token = 2 * (12 * sizes.width**2 * sizes.layers + sizes.width * sizes.vocab)
    attention = 4 * sizes.batch * sizes.seq**2 * sizes.width * sizes.layers
    return 3 * (tokens * per_token + attention)


def token_data(sizes: Sizes):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    samples = sizes.batch * (sizes.steps + sizes.warmup)
    tokens = torch.randint(0, sizes.vocab, (samples, sizes.seq + 1), generator=generator)
    return DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=sizes.batch, shuffle=False)


# ---- one variant per process ----------------------------------------------------------------------
def run_variant(name: str, sizes: Sizes, device: str) -> dict:
    import torch

    torch.manual_seed(0)
    if name.startswith("raw-"):
        return raw_loop(sizes, device, precision=name.removeprefix("raw-"))
    if name.startswith("trainer-"):
        return trainer_loop(sizes, device, precision=name.removeprefix("trainer-"))
    if name == "compiled":  # inductor on the GPU; the dry run's CPU compiles with aot_eager (DRY_COMPILE)
        return trainer_loop(sizes, device, precision="bf16-mixed", compile=True if device == "cuda" else DRY_COMPILE)
    if name == "monitor":
        return monitor_count(sizes, device)
    raise ValueError(f"unknown variant {name!r}")


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _loss(model, batch):
    import torch.nn.functional as F

    tokens, targets = batch
    return F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())


def raw_loop(sizes: Sizes, device: str, *, precision: str) -> dict:
    import torch

    model = build_gpt(sizes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    clock = StepClock(sizes.warmup, device)
    for index, batch in enumerate(token_data(sizes)):
        clock.batch_start(index)
        batch = [t.to(device, non_blocking=True) for t in batch]
        with autocast:
            loss = _loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return clock.result(index + 1)


class StepClock:
    """Wall and CPU time from the start of batch ``warmup`` to the end, synchronised at both ends."""

    def __init__(self, warmup: int, device: str) -> None:
        self.warmup, self.device = warmup, device
        self.wall = self.cpu = 0.0

    def batch_start(self, index: int) -> None:
        if index == self.warmup:
            _sync(self.device)
            self.wall, self.cpu = time.perf_counter(), time.process_time()

    def result(self, batches: int) -> dict:
        _sync(self.device)
        timed = batches - self.warmup
        figures = {
            "step_ms": (time.perf_counter() - self.wall) * 1e3 / timed,
            "cpu_ms": (time.process_time() - self.cpu) * 1e3 / timed,
        }
        if self.device == "cuda":
            import torch

            figures["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        return figures


def _gpt_module(sizes: Sizes):
    import torch

    import trainmesh as tm

    class GPTModule(tm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = build_gpt(sizes)

        def forward(self, tokens):
            return self.gpt(tokens)

        def training_step(self, batch, batch_idx):
            return _loss(self, batch)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    return GPTModule()


def _lean_trainer(device: str, precision: str, *, callbacks: list, compile: bool | dict = False, **options):
    import trainmesh as tm

    return tm.Trainer(
        accelerator=device,
        devices=1,
        precision=precision,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        compile=compile,
        **options,
    )


def trainer_loop(sizes: Sizes, device: str, *, precision: str, compile: bool | dict = False) -> dict:
    import trainmesh as tm

    class Clock(tm.Callback):
        def __init__(self) -> None:
            self.clock = StepClock(sizes.warmup, device)
            self.batches = 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            self.clock.batch_start(batch_idx)
            self.batches = batch_idx + 1

    clock = Clock()
    module = _gpt_module(sizes)
    estimate = _memory_estimate(module, sizes, precision) if not compile else None
    _lean_trainer(device, precision, callbacks=[clock], compile=compile).fit(module, token_data(sizes))
    figures = clock.clock.result(clock.batches)
    if estimate is not None:
        figures["estimate_mib"] = estimate / 2**20
    return figures


def _memory_estimate(module, sizes: Sizes, precision: str) -> int:
    """estimate_memory's peak for one rank, the activations probed on two rows on the CPU."""
    from trainmesh.memory_estimate import estimate_memory

    tokens, targets = next(iter(token_data(sizes)))
    return estimate_memory(
        module, strategy="ddp", world_size=1, precision=precision, optimizer="adamw", batch=(tokens, targets)
    ).peak


def monitor_count(sizes: Sizes, device: str) -> dict:
    from trainmesh.callbacks import ThroughputMonitor

    monitor = ThroughputMonitor()
    trainer = _lean_trainer(device, "bf16-mixed", callbacks=[monitor], log_every_n_steps=max(1, sizes.steps // 3))
    trainer.fit(_gpt_module(sizes), token_data(sizes))
    return {
        "flops_per_batch": monitor.flops_per_batch,
        "hand_flops_per_batch": hand_flops_per_batch(sizes),
        "mfu": monitor.last_figures.get("mfu"),
        "flops_per_sec": monitor.last_figures.get("flops_per_sec"),
    }


# ---- the driver -----------------------------------------------------------------------------------
def _with_source_path() -> dict[str, str]:
    """The environment with this checkout's src/ first on the path (no install needed on a bare machine)."""
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def in_fresh_process(variants: list[str], sizes: Sizes, device: str, timeout: float) -> dict[str, dict]:
    """The variants' figures, run one after another in one new process (each a JSON line as it
    ends); a variant that did not end gets the child's last line of stderr as its error."""
    command = [sys.executable, __file__, "--variant", ",".join(variants), "--sizes", json.dumps(asdict(sizes))]
    command += ["--device", device]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_with_source_path())
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"variant": ')]
    figures = {line["variant"]: line["figures"] for line in lines}
    error = {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]}
    return {name: figures.get(name, error) for name in variants}


def measure_alternating(variants: list[str], repeats: int, sizes: Sizes, device: str, timeout: float, together=False):
    """A fresh process per variant, the order rotated every repeat; ``together``: one per repeat."""
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for repeat in range(repeats):
        order = variants[repeat % len(variants) :] + variants[: repeat % len(variants)]  # rotate the order
        for group in [order] if together else [[name] for name in order]:
            for name, figures in in_fresh_process(group, sizes, device, timeout * len(group)).items():
                runs[name].append(figures)
    return runs


def median_of(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def cuda_test_files() -> list[str]:
    """Test files naming the mark (``mark.cuda``, ``getattr(pytest.mark, "cuda")``, ``add_marker("cuda")``):
    2.7 CPU-s to collect, every file saying "cuda" took 7.4 (tests/test_gpu_check.py: none is missed)."""
    spelled = re.compile(r"""mark\.cuda\b|mark,\s*["']cuda["']|add_marker\(\s*["']cuda["']""")
    return [str(path) for path in sorted((ROOT / "tests").rglob("test_*.py")) if spelled.search(path.read_text())]


def cuda_tests(dry_run: bool, timeout: float) -> dict:
    # A test module that imports a package this machine lacks (keras, say) must not stop the
    # CUDA tests of the others from running: its collection error is counted in the summary.
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "-n",  # in this process: the suite's addopts run it on two xdist workers, too many for one GPU
        "0",
        "--continue-on-collection-errors",
        *cuda_test_files(),
    ]
    if dry_run:
        command.append("--collect-only")
    # From tests/, as the suite's own command runs it (`python -m pytest` puts the working
    # directory on the path, and the tests import their helpers from there).
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=ROOT / "tests", env=_with_source_path()
    )
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {"summary": last, "returncode": done.returncode}


def trainmesh_scale(device: str, dry_run: bool, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "trainmesh",
            "scale",
            "--processes",
            "1",
            "--accelerator",
            device,
            "--mode",  # the table reads the strong sweep only
            "strong",
            "--steps",
            "5" if dry_run else "30",
            "--windows",
            "2" if dry_run else "3",
            "--out-dir",
            out,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_with_source_path())
        lines = done.stdout.splitlines()
        summary = [line for line in lines if line.startswith("[strong]")]
        step_ms = _step_ms_of_the_table(lines)
        if step_ms is not None:
            summary.append(f"step ms: {step_ms}")
        return {"returncode": done.returncode, "lines": summary, "error": done.stderr.strip()[-300:]}


def _step_ms_of_the_table(lines: list[str]) -> str | None:
    """The first row's ``step ms`` in the scale command's table (its header's columns are separated
    by two or more spaces; a row's values are single words): "[strong] N=1: 40946 samples/s, ..."
    has no step time."""
    header = next((i for i, line in enumerate(lines) if line.startswith("N  ") and "step ms" in line), None)
    if header is None or header + 1 >= len(lines):
        return None
    column = re.split(r"\s{2,}", lines[header].strip()).index("step ms")
    values = lines[header + 1].split()
    return values[column] if column < len(values) else None


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}" if a is not None and b else "n/a"


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(device_name: str, sizes: Sizes, runs: dict, tests: dict, scale: dict, seconds: float, how: str) -> str:
    tm32, tmbf = runs["trainer-32-true"], runs["trainer-bf16-mixed"]
    monitor = runs["monitor"][0]
    step = {name: median_of(results, "step_ms") for name, results in runs.items()}
    cpu = {name: median_of(results, "cpu_ms") for name, results in runs.items()}
    rows = [
        ("CUDA-marked tests (`pytest -m cuda`)", tests["summary"], f"exit {tests['returncode']}"),
        (
            "Trainer / raw loop, 32-true, step time",
            ratio(step["trainer-32-true"], step["raw-32-true"]),
            f"{fmt(step['trainer-32-true'])} / {fmt(step['raw-32-true'])} ms; CPU {fmt(cpu['trainer-32-true'])} / "
            f"{fmt(cpu['raw-32-true'])} ms",
        ),
        (
            "Trainer / raw loop, bf16-mixed, step time",
            ratio(step["trainer-bf16-mixed"], step["raw-bf16-mixed"]),
            f"{fmt(step['trainer-bf16-mixed'])} / {fmt(step['raw-bf16-mixed'])} ms; CPU "
            f"{fmt(cpu['trainer-bf16-mixed'])} / {fmt(cpu['raw-bf16-mixed'])} ms",
        ),
        (
            "compiled / eager (Trainer, bf16-mixed), step time",
            ratio(step["compiled"], step["trainer-bf16-mixed"]),
            f"{fmt(step['compiled'])} / {fmt(step['trainer-bf16-mixed'])} ms",
        ),
        (
            "ThroughputMonitor FLOPs per batch / hand count",
            ratio(monitor.get("flops_per_batch"), monitor.get("hand_flops_per_batch")),
            f"{monitor.get('flops_per_batch')} / {monitor.get('hand_flops_per_batch')}",
        ),
        (
            "ThroughputMonitor MFU (bf16-mixed)",
            fmt(monitor.get("mfu"), 3),
            f"{fmt((monitor.get('flops_per_sec') or 0) / 1e12, 1)} TFLOP/s counted",
        ),
    ]
    for precision, results in (("32-true", tm32), ("bf16-mixed", tmbf)):
        estimate, measured = median_of(results, "estimate_mib"), median_of(results, "max_allocated_mib")
        rows.append(
            (
                f"estimate_memory / max_memory_allocated, {precision}",
                ratio(estimate, measured),
                f"{fmt(estimate, 0)} / {fmt(measured, 0)} MiB",
            )
        )
    rows.append(
        (
            "`trainmesh scale --processes 1`",
            f"exit {scale['returncode']}",
            "; ".join(scale["lines"]).replace("|", "/")[:200] or scale["error"][-200:],
        )
    )
    errors = [f"{name}: {run['error']}" for name, results in runs.items() for run in results if "error" in run]
    header = (
        f"GPU check on {device_name}, {time.strftime('%Y-%m-%d')}, {seconds:.0f} s. GPT: vocab {sizes.vocab}, "
        f"width {sizes.width}, {sizes.layers} layers, sequence {sizes.seq}, batch {sizes.batch}; "
        f"{sizes.steps} timed steps after {sizes.warmup}; {how}.\n\n"
    )
    body = "| what | figure | detail |\n|---|---|---|\n" + "".join(f"| {a} | {b} | {c} |\n" for a, b, c in rows)
    return header + body + "".join(f"\nerror: {line}" for line in errors) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="run every path on the CPU with tiny sizes")
    parser.add_argument("--out", default="gpu_check.md")
    parser.add_argument("--repeats", type=int, default=None, help="fresh-process runs per variant")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # a child: its variants, one JSON line each
        for name in args.variant.split(","):
            figures = run_variant(name, Sizes(**json.loads(args.sizes)), args.device)
            print(json.dumps({"variant": name, "figures": figures}), flush=True)
        return
    if args.dry_run:  # no device to ask torch about: this process does not import it (2 CPU-s)
        device, sizes, device_name = "cpu", DRY_SIZES, "CPU (dry run)"
    else:
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device is visible; run with --dry-run to exercise the script on the CPU")
        device, sizes, device_name = "cuda", GPU_SIZES, torch.cuda.get_device_name(0)
    repeats = args.repeats or (1 if args.dry_run else 2)
    started = time.perf_counter()
    tests = cuda_tests(args.dry_run, timeout=240)
    print("cuda tests:", tests["summary"], flush=True)
    variants = ["raw-32-true", "trainer-32-true", "raw-bf16-mixed", "trainer-bf16-mixed", "compiled"]
    if args.dry_run:  # one repeat: the monitor's count joins the variants' one process
        runs = measure_alternating([*variants, "monitor"], repeats, sizes, device, timeout=240, together=True)
        how = "the variants one after another in one fresh process"
    else:
        runs = measure_alternating(variants, repeats, sizes, device, timeout=240)
        runs["monitor"] = [in_fresh_process(["monitor"], sizes, device, timeout=240)["monitor"]]
        how = f"medians of {repeats} fresh-process runs each, variants alternating"
    scale = trainmesh_scale(device, args.dry_run, timeout=240)
    report = table(device_name, sizes, runs, tests, scale, time.perf_counter() - started, how)
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
