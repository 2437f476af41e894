"""Predictions of the ranks' unpadded shares put back in the loader's order (the end-to-end run
against Lightning's ranks: tests/trainer/test_evaluation_shares.py)."""

import torch

from trainmesh.utilities.prediction_order import in_loader_order


def shares(samples: int, world: int, batch_size: int) -> list[list[list[int]]]:
    """Each rank's batches of positions r, r+W, ... (Lightning's UnrepeatedDistributedSampler)."""
    positions = [list(range(rank, samples, world)) for rank in range(world)]
    return [[share[i : i + batch_size] for i in range(0, len(share), batch_size)] for share in positions]


def test_tensor_dict_and_tuple_outputs_come_back_in_one_process_s_batches():
    ranks = shares(33, 2, 16)  # rank 0: batches of 16 and 1, rank 1: one of 16
    parts = [
        [
            {"y": torch.tensor(batch) * 10, "pair": (torch.tensor(batch), torch.tensor(batch).unsqueeze(1))}
            for batch in rank
        ]
        for rank in ranks
    ]
    rows = [[len(batch) for batch in rank] for rank in ranks]
    ordered = in_loader_order(parts, rows, batch_size=16)
    assert [len(batch["y"]) for batch in ordered] == [16, 16, 1]
    assert torch.cat([batch["y"] for batch in ordered]).tolist() == [10 * i for i in range(33)]
    assert torch.cat([batch["pair"][1] for batch in ordered]).squeeze(1).tolist() == list(range(33))


def test_unbatched_predictions_are_dealt_back_one_by_one():
    assert in_loader_order([["a", "c", "e"], ["b", "d"]], [None, None], batch_size=None) == ["a", "b", "c", "d", "e"]


def test_outputs_without_one_row_per_sample_are_not_reordered():
    ranks = shares(8, 2, 2)
    rows = [[len(batch) for batch in rank] for rank in ranks]
    per_batch_mean = [[torch.tensor(float(sum(batch))) for batch in rank] for rank in ranks]  # 0-d: no rows
    assert in_loader_order(per_batch_mean, rows, batch_size=2) is None
    strings = [[[str(i) for i in batch] for batch in rank] for rank in ranks]  # not tensors
    assert in_loader_order(strings, rows, batch_size=2) is None
    wrong_rows = [[torch.zeros(1, 3) for _ in rank] for rank in ranks]  # one row for a batch of 2
    assert in_loader_order(wrong_rows, rows, batch_size=2) is None
