"""The built-in models (the reference MLP, a transformer family sized by ``--size``) and loading a
user's model from ``module:factory``."""
from __future__ import annotations

import importlib
import inspect
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

# --size -> (width, blocks, heads) of the transformer; parameters ~ 12 x width^2 x blocks
# (tiny 30 k, small 0.2 M, base 4.8 M, large 38 M, xl 302 M).
TRANSFORMER_SIZES = {"tiny": (32, 2, 2), "small": (64, 4, 4), "base": (256, 6, 8), "large": (512, 12, 8),
                     "xl": (1024, 24, 16)}


class MLP(nn.Module):
    def __init__(self, in_features: int, num_classes: int, hidden=(256, 256), dropout: float = 0.1):
        super().__init__()
        layers, width = [], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """Pre-norm transformer block: attention (torch's scaled_dot_product_attention), then a GELU MLP."""

    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        drop = self.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=drop).transpose(1, 2).reshape(b, t, d)
        h = h + F.dropout(self.proj(a), drop, self.training)
        return h + F.dropout(self.fc2(F.gelu(self.fc1(self.norm2(h)))), drop, self.training)


class FeatureTransformer(nn.Module):
    """A transformer over a table row: every feature is a token (its value times a learned vector plus
    a learned offset), a class token is prepended, and its final state is classified. ``blocks`` is a
    ModuleList so that sharding (FSDP2) can group the parameters block by block."""

    def __init__(self, in_features: int, num_classes: int, width: int = 64, depth: int = 4, heads: int = 4,
                 dropout: float = 0.1):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(in_features, width) * 0.02)
        self.offset = nn.Parameter(torch.zeros(in_features, width))
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.unsqueeze(-1) * self.scale + self.offset
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), h], dim=1)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h[:, 0]))


def transformer(in_features: int, num_classes: int, size: str = "small", dropout: float = 0.1) -> FeatureTransformer:
    width, depth, heads = TRANSFORMER_SIZES[size]
    return FeatureTransformer(in_features, num_classes, width, depth, heads, dropout)


def parse_hidden(spec: str) -> tuple:
    spec = (spec or "").strip()
    return tuple(int(v) for v in spec.split(",") if v.strip()) if spec else ()


def _mlp(in_features: int, num_classes: int, hidden="256,256", dropout: float = 0.1) -> nn.Module:
    return MLP(in_features, num_classes, parse_hidden(hidden) if isinstance(hidden, str) else tuple(hidden), dropout)


def _transformer(in_features: int, num_classes: int, hidden=None, dropout: float = 0.1,
                 size: Optional[str] = None) -> nn.Module:
    size = size or "small"
    if size not in TRANSFORMER_SIZES:
        raise ValueError(f"--size {size!r}: the transformer comes in {', '.join(TRANSFORMER_SIZES)}")
    return transformer(in_features, num_classes, size, dropout)


# train_entry's own models, by name: all that `hpclaunch export` builds from a manifest without being
# told to (it imports no module a run directory names; docs/train-entry.md, "Export"). The names are
# manifest.BUILTIN_MODELS's (that module imports no torch).
BUILTIN_MODELS = {"mlp": _mlp, "transformer": _transformer}


def build_builtin(name: str, in_features: int, num_classes: int, hidden="256,256", dropout: float = 0.1,
                  size: Optional[str] = None) -> nn.Module:
    if name == "transformer":
        return _transformer(in_features, num_classes, hidden, dropout, size)
    return BUILTIN_MODELS[name](in_features, num_classes, hidden, dropout)


def build_model(spec: str | None, in_features: int, num_classes: int, hidden: str = "256,256",
                dropout: float = 0.1, size: str = "small") -> nn.Module:
    """``spec`` None, ``mlp`` or ``transformer``: a built-in model (the transformer of ``size``).
    Else ``package.module:factory``, imported: the user's own --model (or export's --model), never a
    name read from a run directory. The factory gets ``in_features`` and ``num_classes`` as keyword
    arguments if it accepts them, and must return an nn.Module."""
    if not spec or spec in BUILTIN_MODELS:
        return build_builtin(spec or "mlp", in_features, num_classes, hidden, dropout, size)
    if ":" not in spec:
        raise ValueError(f"--model {spec!r}: expected mlp, transformer or module:factory")
    mod_name, attr = spec.split(":", 1)
    factory = importlib.import_module(mod_name)
    for part in attr.split("."):
        factory = getattr(factory, part)
    params = inspect.signature(factory).parameters
    kwargs = {}
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for key, value in (("in_features", in_features), ("num_classes", num_classes)):
        if accepts_any or key in params:
            kwargs[key] = value
    model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise TypeError(f"--model {spec}: factory returned {type(model).__name__}, not a torch.nn.Module")
    return model
