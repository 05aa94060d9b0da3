"""The reference model (an MLP) and loading a user's model from ``module:factory``."""
from __future__ import annotations

import importlib
import inspect

import torch
from torch import nn


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


def parse_hidden(spec: str) -> tuple:
    spec = (spec or "").strip()
    return tuple(int(v) for v in spec.split(",") if v.strip()) if spec else ()


def _mlp(in_features: int, num_classes: int, hidden="256,256", dropout: float = 0.1) -> nn.Module:
    return MLP(in_features, num_classes, parse_hidden(hidden) if isinstance(hidden, str) else tuple(hidden), dropout)


# train_entry's own models, by name: all that `hpclaunch export` builds from a manifest without being
# told to (it imports no module a run directory names; docs/train-entry.md, "Export").
BUILTIN_MODELS = {"mlp": _mlp}


def build_builtin(name: str, in_features: int, num_classes: int, hidden="256,256", dropout: float = 0.1) -> nn.Module:
    return BUILTIN_MODELS[name](in_features, num_classes, hidden, dropout)


def build_model(spec: str | None, in_features: int, num_classes: int, hidden: str = "256,256",
                dropout: float = 0.1) -> nn.Module:
    """``spec`` None -> MLP. Else ``package.module:factory``, imported: the user's own --model (or
    export's --model), never a name read from a run directory. The factory gets ``in_features`` and
    ``num_classes`` as keyword arguments if it accepts them, and must return an nn.Module."""
    if not spec:
        return build_builtin("mlp", in_features, num_classes, hidden, dropout)
    if ":" not in spec:
        raise ValueError(f"--model {spec!r}: expected module:factory")
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
