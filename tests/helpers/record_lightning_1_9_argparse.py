"""Record what pytorch-lightning 1.9.5's ``Trainer.add_argparse_args`` produces, as data.

1.9.5 and Lightning 2.6 cannot share one environment, so this runs in a venv of its own (see
``record_lightning_1_9_names.py`` for how to make it):

    /work/ref/pl19/bin/python tests/helpers/record_lightning_1_9_argparse.py

and rewrites ``tests/helpers/lightning_1_9_argparse.json``: each argument's name (in the parser's order),
default, how its value is parsed (the parser's type and nargs) and whether it has a help line, and the namespace ``parse_argparser`` returns for
sample command lines. ``tests/trainer/test_argparse_1x.py`` compares trainmesh's with it.
"""

import argparse
import json
from pathlib import Path

import pytorch_lightning as pl

OUT = Path(__file__).resolve().parent / "lightning_1_9_argparse.json"
# Command lines a 1.x program's users type (the seeds' gpus/strategy, and each kind of argument).
COMMAND_LINES = [
    [],
    ["--gpus", "2"],
    ["--gpus", "0,1"],
    ["--max_epochs", "3", "--min_epochs", "1"],
    ["--precision", "16"],
    ["--precision", "bf16"],
    ["--fast_dev_run"],
    ["--fast_dev_run", "3"],
    ["--enable_checkpointing", "False"],
    ["--enable_progress_bar", "false", "--enable_model_summary", "0"],
    ["--limit_train_batches", "0.5", "--limit_val_batches", "10"],
    ["--val_check_interval", "0.25", "--check_val_every_n_epoch", "2"],
    ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--num_nodes", "1"],
    ["--default_root_dir", "/tmp/runs", "--log_every_n_steps", "10"],
    ["--accumulate_grad_batches", "4", "--gradient_clip_val", "0.5", "--gradient_clip_algorithm", "value"],
    ["--max_steps", "100", "--num_sanity_val_steps", "0"],
    ["--auto_select_gpus"],
    ["--tpu_cores", "8"],
    ["--sync_batchnorm"],
    ["--overfit_batches", "0.1"],
    ["--min_steps", "5", "--reload_dataloaders_every_n_epochs", "2", "--detect_anomaly", "--benchmark", "false"],
]


def _kind(action: argparse.Action) -> str:
    kind = getattr(action.type, "__name__", repr(action.type))
    return kind + ("?" if action.nargs == "?" else "")


if __name__ == "__main__":
    parser = pl.Trainer.add_argparse_args(argparse.ArgumentParser())
    arguments = {
        a.dest: {"default": repr(a.default), "kind": _kind(a), "help": bool(a.help)}
        for a in parser._actions
        if a.dest != "help"
    }
    parses = []
    for line in COMMAND_LINES:
        namespace = pl.Trainer.parse_argparser(parser.parse_args(line))
        given = {k: repr(v) for k, v in vars(namespace).items() if any(f"--{k}" == w for w in line)}
        parses.append({"argv": line, "given": given})
    OUT.write_text(json.dumps({"version": pl.__version__, "arguments": arguments, "parses": parses}, indent=1) + "\n")
    print(f"recorded {len(arguments)} arguments of pytorch-lightning {pl.__version__}")
