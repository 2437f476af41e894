"""Which submodules FSDP2 shards as units of their own (``sharded``, ``fsdp``, ``hsdp`` and the
data-parallel axes of model parallelism).

A unit's parameters are gathered whole only while it runs (and again for its backward); what
no unit takes stays in the root, which FSDP2 keeps gathered from the start of forward to the
end of backward. One unit for the whole model therefore gathers every parameter at once, and
ZeRO-3 saves nothing at the step. Chosen automatically as torchtitan shards a transformer (each
layer, the token embeddings, the output head), without knowing the model's names:

1. Blocks: the members of a ``ModuleList``/``ModuleDict``/``Sequential`` that are several
   instances of one class (a ``ModuleList``/``ModuleDict`` of a single class counts whole,
   even with one member: a pipeline stage may hold one layer of the list), and torch's
   ``TransformerEncoderLayer``/``TransformerDecoderLayer`` anywhere, searched from the top
   down: what a block holds is never a unit of its own.
2. Large modules outside the blocks (embeddings, the output head), largest first, until the
   root keeps at most a quarter of the largest unit's parameters.

A module whose parameters are also registered outside it (tied weights: a head sharing the
embedding's matrix, one layer object repeated) is never a unit: two units would each shard the
same tensor. A unit's parameters are gathered when its ``forward`` runs, so a model that reads
a submodule's weights without calling it (``x @ self.embed.weight.T``) needs ``wrap=`` naming
what to shard.

>>> from torch import nn
>>> model = nn.Sequential(nn.Embedding(100, 8), *[nn.TransformerEncoderLayer(8, 2, 16) for _ in range(3)])
>>> [type(unit).__name__ for unit in shard_units(model, wrap=None, min_num_params=None)]
['Embedding', 'TransformerEncoderLayer', 'TransformerEncoderLayer', 'TransformerEncoderLayer']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from torch import nn

# torch's own transformer layers: blocks wherever they are, in a container or not.
BLOCK_CLASSES: tuple[type[nn.Module], ...] = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)
# The root stays gathered for the whole step: it may keep this fraction of the largest unit.
_ROOT_SHARE = 4


def shard_units(
    module: nn.Module, *, wrap: Sequence[type[nn.Module]] | None, min_num_params: int | None
) -> list[nn.Module]:
    """The submodules that become their own shard units, innermost first (as fully_shard needs).

    ``wrap``: every submodule of these classes. ``min_num_params``: the smallest submodules
    holding at least that many parameters. Neither: chosen automatically (the module's docstring).
    """
    if wrap:
        units = [m for m in module.modules() if m is not module and isinstance(m, tuple(wrap))]
        if not units:
            names = ", ".join(t.__name__ for t in wrap)
            raise ValueError(
                f"FSDPStrategy(wrap=[{names}]) matches no submodule of {type(module).__name__}; name classes "
                "the model contains (e.g. its transformer block), or use min_num_params="
            )
        return units[::-1]
    if min_num_params:

        def own_size(m: nn.Module) -> int:
            return sum(p.numel() for p in m.parameters())

        return [
            m
            for m in list(module.modules())[::-1]
            if m is not module
            and own_size(m) >= min_num_params
            and not any(own_size(c) >= min_num_params for c in m.children())
        ]
    return automatic_units(module)


def automatic_units(module: nn.Module) -> list[nn.Module]:
    """Each repeated block, then the large modules outside them; innermost first."""
    registered = Counter(id(p) for _, p in module.named_parameters(remove_duplicate=False))
    blocks = [b for b in repeated_blocks(module) if _self_contained(b, registered)]
    largest = max((_size(block.parameters()) for block in blocks), default=0)
    # Modules sharing weights with what is outside them stay in the root, whatever their size.
    movable = sorted(
        (m for m in _outside(module, blocks) if _self_contained(m, registered)), key=lambda m: -_size(m.parameters())
    )
    left = _size(p for m in movable for p in m.parameters())
    leaves: list[nn.Module] = []
    for candidate in movable:
        if left <= largest // _ROOT_SHARE:
            break
        size = _size(candidate.parameters())
        leaves.append(candidate)
        left, largest = left - size, max(largest, size)
    chosen = {id(m) for m in blocks + leaves}
    return [m for m in _post_order(module) if id(m) in chosen]


def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The blocks under ``module``, searched from the top down (nothing inside a block)."""
    blocks: list[nn.Module] = []

    def visit(parent: nn.Module) -> None:
        repeated = {id(m) for m in _repeated_members(parent)}
        for child in parent.children():
            if id(child) in repeated or isinstance(child, BLOCK_CLASSES):
                blocks.append(child)
            else:
                visit(child)

    visit(module)
    return blocks


def _repeated_members(parent: nn.Module) -> list[nn.Module]:
    if not isinstance(parent, _CONTAINERS):
        return []
    members = [m for m in parent.children() if any(True for _ in m.parameters())]
    classes = Counter(type(m) for m in members)
    if isinstance(parent, (nn.ModuleList, nn.ModuleDict)) and len(classes) == 1:
        return members
    return [m for m in members if classes[type(m)] >= 2]


def _outside(module: nn.Module, blocks: list[nn.Module]) -> Iterator[nn.Module]:
    """The modules outside the blocks that may be units: the outermost ones holding parameters
    of their own. What such a module holds is never a candidate: a layer with weights of its
    own may read its children's weights without calling them (``MultiheadAttention`` reads
    ``out_proj.weight``), and a unit's weights are gathered only when its forward runs."""
    block_ids = {id(b) for b in blocks}
    holds_block: dict[int, bool] = {}

    def mark(m: nn.Module) -> bool:
        if id(m) not in holds_block:
            holds_block[id(m)] = id(m) in block_ids or any([mark(child) for child in m.children()])
        return holds_block[id(m)]

    def visit(parent: nn.Module) -> Iterator[nn.Module]:
        for child in parent.children():
            if id(child) in block_ids:
                continue
            if not holds_block[id(child)] and any(True for _ in child.parameters(recurse=False)):
                yield child
            else:
                yield from visit(child)

    mark(module)
    yield from visit(module)


def _self_contained(unit: nn.Module, registered: Counter[int]) -> bool:
    """No parameter of ``unit`` is registered anywhere outside it (tied weights, shared layers)."""
    inner = Counter(id(p) for _, p in unit.named_parameters(remove_duplicate=False))
    return all(registered[key] == count for key, count in inner.items())


def _size(params: Iterable[nn.Parameter]) -> int:
    return sum(p.numel() for p in params)


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    seen: set[int] = set()

    def walk(m: nn.Module) -> Iterator[nn.Module]:
        for child in m.children():
            if id(child) not in seen:
                seen.add(id(child))
                yield from walk(child)
        yield m

    yield from walk(module)
