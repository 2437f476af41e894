"""A small Llama-3-style decoder, written the way torchtitan's is, for model-parallel tests.

What makes it a real test: grouped-query attention (fewer key/value heads than query heads),
rotary embeddings held in a *complex* ``freqs_cis`` buffer, RMSNorm, a SwiGLU feed-forward,
blocks in a ``ModuleDict`` called ``layers``, an ``init_weights()`` that builds the buffer afresh
(assigns it, as torchtitan does, instead of writing into it), and optionally tied input and
output embeddings. The forward skips the parts another pipeline stage holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

IGNORE_INDEX = -100


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 64
    dim: int = 32
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    seq_len: int = 16
    rope_theta: float = 10000.0
    tie_embeddings: bool = False


def precompute_freqs_cis(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64


def apply_rotary(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """``freqs_cis``: the table (positions 0, 1, ... in every row) or per-row rotations [batch, seq, :]."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    per_row = freqs_cis if freqs_cis.dim() == 3 else freqs_cis[: x.shape[1]].unsqueeze(0)
    rotated = pairs * per_row.unsqueeze(2)
    return torch.view_as_real(rotated).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.head_dim = config.dim // config.n_heads
        self.kv_groups = config.n_heads // config.n_kv_heads
        self.wq = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a share of the heads.
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        q, k = apply_rotary(q, freqs_cis), apply_rotary(k, freqs_cis)
        k = k.repeat_interleave(self.kv_groups, dim=2)
        v = v.repeat_interleave(self.kv_groups, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim)
        self.feed_forward = FeedForward(config.dim, 2 * config.dim)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(tm.Module):
    """Tokens in, logits out (activations in and out on middle pipeline stages); AdamW, mean loss.

    ``summed_loss=True``: training_step returns torchtitan's form, ``{"loss": summed over the valid
    tokens, "num_tokens": their count}``, for a loss normalised by the global token count."""

    def __init__(
        self,
        config: LlamaConfig = LlamaConfig(),
        lr: float = 1e-2,
        summed_loss: bool = False,
        *,
        build_in_configure_model: bool = False,
        adam_eps: float = 1e-8,
    ):
        super().__init__()
        self.config = config
        self.lr = lr
        self.adam_eps = adam_eps
        self.summed_loss = summed_loss
        if not build_in_configure_model:
            self.build()

    def configure_model(self) -> None:
        """Builds the layers here when asked to (the meta device under fsdp, tp and pp)."""
        if "layers" not in self._modules:
            self.build()

    def build(self) -> None:
        config = self.config
        self.tok_embeddings = nn.Embedding(config.vocab, config.dim)
        self.register_buffer("freqs_cis", self._freqs_cis(), persistent=True)
        self.layers = nn.ModuleDict({str(i): Block(config) for i in range(config.n_layers)})
        self.norm = RMSNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # torchtitan's convention: __init__ ends with init_weights(), so an eager build and a
        # meta build (trainmesh calls init_weights() after sharding) draw the same numbers.
        self.init_weights()

    def _freqs_cis(self) -> torch.Tensor:
        config = self.config
        return precompute_freqs_cis(config.dim // config.n_heads, config.seq_len, config.rope_theta)

    def init_weights(self) -> None:
        """torchtitan's pattern: the buffer is replaced, not written into."""
        with torch.device(self.freqs_cis.device):
            self.freqs_cis = self._freqs_cis()
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight, std=0.02)
        for block in self.layers.values():
            for linear in (
                block.attention.wq,
                block.attention.wk,
                block.attention.wv,
                block.attention.wo,
                block.feed_forward.w1,
                block.feed_forward.w2,
                block.feed_forward.w3,
            ):
                nn.init.normal_(linear.weight, std=0.02)
            block.attention_norm.reset_parameters()
            block.ffn_norm.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None and not self.config.tie_embeddings:
            nn.init.normal_(self.output.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``positions`` [batch, seq]: each token's position in its document (packed documents
        restart at 0), used by the rotary embedding of every block."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        freqs_cis = self.freqs_cis if positions is None else self.freqs_cis[positions]
        for layer in self.layers.values():
            h = layer(h, freqs_cis)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h

    def pipeline_kwargs(self, batch):
        return {"positions": batch[2]} if len(batch) == 3 else {}

    def training_step(self, batch, batch_idx):
        tokens, targets = batch[:2]
        logits = self(tokens, **self.pipeline_kwargs(batch))
        reduction = "sum" if self.summed_loss else "mean"
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX, reduction=reduction
        )
        if self.summed_loss:
            return {"loss": loss, "num_tokens": (targets != IGNORE_INDEX).sum()}
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, eps=self.adam_eps)

    def tensor_parallel_plan(self):
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "layers.*.attention.wq": ColwiseParallel(),
            "layers.*.attention.wk": ColwiseParallel(),
            "layers.*.attention.wv": ColwiseParallel(),
            "layers.*.attention.wo": RowwiseParallel(),
            "layers.*.feed_forward.w1": ColwiseParallel(),
            "layers.*.feed_forward.w3": ColwiseParallel(),
            "layers.*.feed_forward.w2": RowwiseParallel(),
            "output": ColwiseParallel(output_layouts=Replicate()),
        }


def token_batches(
    config: LlamaConfig, *, samples: int = 32, seed: int = 0, uneven_padding: bool = True
) -> TensorDataset:
    """Random tokens with next-token targets; some rows padded with IGNORE_INDEX by different amounts."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab, (samples, config.seq_len + 1), generator=generator)
    inputs, targets = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    if uneven_padding:
        # Row i keeps (i * 5) % seq_len + 1 targets: padding spread unevenly over any split.
        for row in range(samples):
            keep = (row * 5) % config.seq_len + 1
            targets[row, keep:] = IGNORE_INDEX
    return TensorDataset(inputs, targets)


def token_loader(config: LlamaConfig, *, batch_size: int = 8, **kwargs) -> DataLoader:
    return DataLoader(token_batches(config, **kwargs), batch_size=batch_size, shuffle=False)


def packed_positions(config: LlamaConfig, samples: int, *, seed: int = 1) -> torch.Tensor:
    """Per-row positions of packed documents: each row restarts at 0 at its own boundaries."""
    generator = torch.Generator().manual_seed(seed)
    positions = torch.empty(samples, config.seq_len, dtype=torch.long)
    for row in range(samples):
        start = int(torch.randint(1, config.seq_len, (1,), generator=generator))
        positions[row] = torch.cat([torch.arange(start), torch.arange(config.seq_len - start)])
    return positions


def position_loader(
    config: LlamaConfig, *, batch_size: int = 8, samples: int = 32, seed: int = 0, uneven_padding: bool = True
) -> DataLoader:
    """(tokens, targets, positions) batches: packed documents, positions restarting in each row."""
    tokens, targets = token_batches(config, samples=samples, seed=seed, uneven_padding=uneven_padding).tensors
    return DataLoader(
        TensorDataset(tokens, targets, packed_positions(config, samples, seed=seed + 1)),
        batch_size=batch_size,
        shuffle=False,
    )
