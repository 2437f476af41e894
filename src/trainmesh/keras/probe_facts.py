"""What a refused step did in the step probe's run on the whole batch, named in its refusal (step_probe.py).

The probe compares a step's gradients on a batch with the mean of its halves'; probe_reasons.py names a sum or a
ratio from the gradients alone. Two other kinds of step that are no mean show in what the step calls, not in the
gradients' relation, and were refused in general words (k-custom2's programs, /work/progs/k-progs4 reasons.log):
- a step applying the same optimizer more than once per batch (updates on parts of its batch: ``half_steps``,
  1.36 of the gradients' norm): under N processes each process cuts its own part again;
- a step differentiating with respect to a tensor of its batch (``torch.autograd.grad`` of a mean over the batch
  with respect to its inputs: an adversarial perturbation, ``raw_grad_adv`` 0.413, or a gradient penalty,
  ``wgan_gp_mean`` 0.337): a mean over ``b`` samples gives each sample's input ``1/b`` of its own gradient, so on a
  part of the batch each sample's is larger.
Recorded in the run on the whole batch only: each Keras optimizer's ``apply`` (counted by the probe's recorder)
and ``torch.autograd.grad`` (routed for the run, restored after) with inputs other than the model's variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class StepFacts:
    """Counts of each optimizer's applies, and whether the step took a gradient with respect to a non-variable."""

    def __init__(self) -> None:
        self.applies: dict[int, int] = {}
        self.input_gradient = False

    def applied(self, optimizer: Any) -> None:
        self.applies[id(optimizer)] = self.applies.get(id(optimizer), 0) + 1


@contextlib.contextmanager
def watching(model: Any, facts: StepFacts | None) -> Iterator[None]:
    """``torch.autograd.grad`` notes in ``facts`` a gradient taken with respect to a tensor not a variable of ``model``."""
    if facts is None:
        yield
        return
    torch_grad = torch.autograd.grad
    variables = {id(variable.value) for variable in model.variables}

    def grad(outputs: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        facts.input_gradient = facts.input_gradient or any(id(t) not in variables for t in tensors)
        return torch_grad(outputs, inputs, *args, **kwargs)

    torch.autograd.grad = grad
    try:
        yield
    finally:
        torch.autograd.grad = torch_grad


def sentence(facts: StepFacts) -> str:
    """What the step did that makes it no mean (a sentence for the refusal), or "" for nothing known."""
    if facts.input_gradient:
        return (
            "the step differentiates a loss over the batch with respect to a tensor of the batch "
            "(torch.autograd.grad with respect to its inputs, as an adversarial perturbation or a gradient penalty "
            "does): a mean over b samples gives each sample's input 1/b of its own gradient, so on a process's part "
            "of the batch each sample's is larger"
        )
    repeated = max(facts.applies.values(), default=0)
    if repeated > 1:
        return (
            f"the step applies an optimizer {repeated} times per batch, and its applies are given other gradients "
            "than the mean of its halves' (as where a step updates on parts of its batch that it cuts itself: under "
            "several processes each process cuts its own part of the global batch again, so each update sees other "
            "samples than one process's)"
        )
    return ""


FIXES = {
    "applies an optimizer": "Apply once per batch where the step cuts its batch into parts (accumulate the parts' "
    "gradients, then apply); where each apply takes the whole batch (one per caption, say), make each apply's loss a "
    "mean over the samples",
    "differentiates a loss": "Differentiate the sum over the samples with respect to the inputs (ops.sum, or the "
    "mean times the batch size: each sample then gets its own gradient whatever the batch)",
}
