"""zero1 shards any torch.optim optimizer: same class, same hyper-parameters, same weights as the
plain optimizer under DDP (one 2-process gloo group runs them all)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from legs import FORK_WORKERS, HERE, run  # noqa: E402

LEG = HERE / "zero1_optimizers_run.py"


def test_zero1_matches_every_torch_optimizer_under_ddp(tmp_path):
    sys.path.insert(0, str(HERE))
    from zero1_optimizers_run import NOT_SHARDABLE, optimizer_classes

    out = tmp_path / "problems.json"
    result = run(str(LEG), str(out), timeout=150, forked=True, env=FORK_WORKERS)
    assert result.returncode == 0, result.stderr[-3000:]
    problems = json.loads(out.read_text())
    expected = set(optimizer_classes()) - NOT_SHARDABLE
    assert {"AdamW", "Adam", "SGD"} <= expected and set(problems) == expected
    failed = {name: problem for name, problem in problems.items() if problem is not None}
    assert not failed, "\n".join(f"{name}: {problem}" for name, problem in failed.items())
