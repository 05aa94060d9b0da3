"""Fake ``horovod.torch`` for one process: records the calls train_entry makes (FAKE_HVD_LOG).

It checks the integration (DistributedOptimizer wrapping, broadcasts, synchronize before
clipping, skip_synchronize around step), not horovod itself.
"""
import contextlib
import json
import os

Sum, Max, Average = "sum", "max", "average"
_log_path = os.environ.get("FAKE_HVD_LOG")


def _log(event, **kw):
    if _log_path:
        with open(_log_path, "a") as f:
            f.write(json.dumps({"event": event, **kw}) + "\n")


def init():
    _log("init")


def rank():
    return 0


def size():
    return 1


def local_rank():
    return 0


def local_size():
    return 1


def cross_rank():
    return 0


def allreduce(tensor, op=None, name=None):
    return tensor.clone()


def barrier():
    _log("barrier")


def shutdown():
    _log("shutdown")


def broadcast_parameters(params, root_rank):
    _log("broadcast_parameters", n=len(params), root_rank=root_rank)


def broadcast_optimizer_state(optimizer, root_rank):
    _log("broadcast_optimizer_state", root_rank=root_rank)


class _Mixin:
    _skip = False

    def synchronize(self):
        _log("synchronize")

    @contextlib.contextmanager
    def skip_synchronize(self):
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not self._skip:
            _log("step_without_skip")
        return super().step(closure)


def DistributedOptimizer(optimizer, named_parameters=None, backward_passes_per_step=1, **kw):
    _log("DistributedOptimizer", backward_passes_per_step=backward_passes_per_step,
         named=len(list(named_parameters or [])))
    cls = type(optimizer.__class__.__name__, (_Mixin, optimizer.__class__), {})
    return cls(optimizer.param_groups)   # like horovod: a new instance over the same param groups
