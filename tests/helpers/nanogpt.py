"""nanoGPT's model (karpathy/nanoGPT, model.py) in its published layout, for pipeline tests.

Kept as published: the blocks in ``self.transformer = nn.ModuleDict(dict(wte=..., wpe=...,
drop=..., h=nn.ModuleList([...]), ln_f=...))``, ``lm_head`` tied to ``wte`` (nanoGPT writes
``self.transformer.wte.weight = self.lm_head.weight``), its ``_init_weights`` and the scaled
init of every ``c_proj``, and a forward that iterates ``for block in self.transformer.h``.
``PublishedGPT.forward`` is nanoGPT's forward unchanged; ``GPT.forward`` is the one change the
README asks of a pipelined model: it skips the members another stage holds (absent from the
``ModuleDict``, a dropped ``lm_head`` is None). Dropout 0, so every layout draws nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False"""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(tm.Module):
    """nanoGPT's GPT as a trainmesh Module: its __init__, tokens in, logits out; AdamW."""

    def __init__(self, config: GPTConfig = GPTConfig(), lr: float = 1e-3):
        super().__init__()
        self.config, self.lr = config, lr
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # nanoGPT's weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        """nanoGPT's forward, skipping what another pipeline stage holds; logits at every position."""
        t = self.transformer
        if "wte" in t:
            pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
            x = t.drop(t.wte(idx) + t.wpe(pos))
        else:
            x = idx
        for block in t.h:
            x = block(x)
        x = t.ln_f(x) if "ln_f" in t else x
        return self.lm_head(x) if self.lm_head is not None else x

    def training_step(self, batch, batch_idx):
        idx, targets = batch
        logits = self(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)

    def tensor_parallel_plan(self):
        """The tie on one placement (both Shard(0) over the vocabulary) and the MLPs split; the fused
        attention projection stays whole (its q, k, v split would cut across a shard)."""
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {
            "transformer.wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "transformer.h.*.mlp.c_fc": ColwiseParallel(),
            "transformer.h.*.mlp.c_proj": RowwiseParallel(),
            "lm_head": ColwiseParallel(output_layouts=Replicate()),
        }


class PublishedGPT(GPT):
    """nanoGPT's forward exactly as published: every member used unconditionally."""

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, (
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        )
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def training_step(self, batch, batch_idx):
        idx, targets = batch
        _, loss = self(idx, targets)
        return loss


def gpt_loader(config: GPTConfig = GPTConfig(), *, batch_size: int = 8, samples: int = 32, seed: int = 0) -> DataLoader:
    """Random tokens, next-token targets."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab_size, (samples, config.block_size + 1), generator=generator)
    dataset = TensorDataset(tokens[:, :-1].clone(), tokens[:, 1:].clone())
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)
