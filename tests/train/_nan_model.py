"""``--model _nan_model:build``: a small reference MLP whose output turns NaN at the Nth training
forward of this process ($NAN_AT; 0 = never; only on rank $NAN_RANK when that is set), so a test
knows the exact step training diverges at."""
import os

from hpclaunch.train_entry.model import MLP


class Poisoned(MLP):
    def __init__(self, in_features, num_classes):
        super().__init__(in_features, num_classes, (32,), 0.0)
        self.calls, self.nan_at = 0, int(os.environ.get("NAN_AT", "0"))
        if os.environ.get("NAN_RANK", os.environ.get("RANK", "0")) != os.environ.get("RANK", "0"):
            self.nan_at = 0

    def forward(self, x):
        out = super().forward(x)
        if self.training:   # validation runs in eval mode and does not count
            self.calls += 1
            if self.calls == self.nan_at:
                out = out * float("nan")
        return out


def build(in_features, num_classes):
    return Poisoned(in_features, num_classes)
