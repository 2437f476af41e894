"""A loss normalised by the global count of valid tokens (torchtitan's): ``training_step`` returns
``{"loss": summed, "num_tokens": n}``, the loss summed over this (micro-)batch's valid tokens
(those not ``ignore_index``) and their count.

The count is known only after forward, so each backward runs on the summed loss as it is (not
divided by the accumulation window nor the pipeline's micro-batch count), and once the optimizer
step's gradients are complete (after the window's last backward and the data-parallel
reduction; before ``on_before_optimizer_step`` and clipping) they are divided by the count summed
over the window's batches, their micro-batches and the data-parallel ranks
(``Runtime.normalize_gradients``). Every layout then trains as one process on the whole batch
with the mean over its valid tokens; a plain ``return loss`` averages per-batch (per micro-batch,
per rank) means instead, which weighs tokens unevenly when padding is uneven.
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.strategies.step import StepResult


class TokenLossWindow:
    """The summed loss and valid tokens of one optimizer step's batches (its accumulation window).

    >>> window = TokenLossWindow("Net")
    >>> window.add(StepResult(torch.tensor(6.0), None, torch.tensor(3.0)))
    >>> window.tokens
    tensor(3.)
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.tokens: torch.Tensor | None = None
        self.loss_sum: torch.Tensor | None = None
        self.mean_losses = 0  # batches of the window whose training_step returned a mean loss

    def add(self, result: StepResult) -> None:
        if result.num_tokens is None:
            self.mean_losses += 1
            count = None
        else:
            count = result.num_tokens
            assert result.loss is not None, "a step that counted tokens has its loss on every rank"
            loss = result.loss.detach().to(count)
            self.tokens = count if self.tokens is None else self.tokens + count
            self.loss_sum = loss if self.loss_sum is None else self.loss_sum + loss
        if self.mean_losses and self.tokens is not None:
            raise ValueError(
                f"{self.owner}.training_step returned num_tokens for some batches of one optimizer step and not for "
                f"others (this one: {'with' if count is not None else 'without'}): the summed losses and the mean "
                "losses would be added into one gradient. Return {'loss': summed_loss, 'num_tokens': n} from every "
                "training step, or a mean loss from every one"
            )

    def close(self, runtime: Any, model: Any) -> torch.Tensor | None:
        """At the optimizer step: the window's gradients divided by the global count; returns the
        step's global mean loss (None when the window's losses were means)."""
        tokens, loss_sum = self.tokens, self.loss_sum
        self.tokens = self.loss_sum = None
        self.mean_losses = 0
        if tokens is None:
            return None
        mean_loss: torch.Tensor | None = runtime.normalize_gradients(model, tokens, loss_sum=loss_sum)
        return mean_loss


def refuse_manual_tokens(output: Any, owner: str) -> None:
    """Manual optimization: the module runs its own backward and optimizer steps, so the loop has
    no point at which the gradients are complete and could be divided."""
    if isinstance(output, dict) and output.get("num_tokens") is not None:
        raise ValueError(
            f"{owner}.training_step returned num_tokens with manual optimization (automatic_optimization = False): "
            "trainmesh divides the gradients by the global token count where it steps the optimizer, and here "
            "training_step steps it. Divide in training_step: self.manual_backward(summed_loss * world / total) "
            "with total = self.all_gather(n).sum() and world its number of entries (DDP and FSDP average gradients "
            "over the ranks), and return the mean loss; or use automatic optimization"
        )
