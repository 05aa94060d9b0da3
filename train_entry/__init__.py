"""Rank-side runtime: ``python -m hpclaunch.train_entry``.

Nothing here imports torch at package import time; torch is imported inside the
modules that need it (dist_init, data, model, trainer, parts of checkpoint).
"""

__all__ = ["ModelTrainer"]


def __getattr__(name):  # lazy: `from hpclaunch.train_entry import ModelTrainer`
    if name == "ModelTrainer":
        from .trainer import ModelTrainer

        return ModelTrainer
    raise AttributeError(name)
