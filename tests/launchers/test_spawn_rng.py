"""ddp_spawn workers start from the parent's RNG state, as ddp workers (which re-run the
script, seed_everything included) do: a seeded parent gives reproducible workers."""

import textwrap

from helpers.processes import run_program

PROGRAM = textwrap.dedent("""
    import torch
    import trainmesh as tm

    if __name__ == "__main__":
        tm.seed_everything(3)
        runtime = tm.Runtime(accelerator="cpu", strategy="ddp_spawn", devices=2)
        in_worker = runtime.launch(torch.rand, 4)  # rank 0's draw comes back
        print("SAME" if torch.equal(in_worker, torch.rand(4)) else f"DIFFERENT {in_worker}")
""")


def test_spawned_workers_start_from_the_parents_seeded_rng(tmp_path):
    script = tmp_path / "spawn_rng.py"
    script.write_text(PROGRAM)
    result = run_program([str(script)], timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SAME" in result.stdout, result.stdout
