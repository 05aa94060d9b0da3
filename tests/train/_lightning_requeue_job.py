"""A Lightning program using hpclaunch's RequeueCallback (tests/train/test_lightning_requeue.py).

Attempt 0 is asked to requeue after its 7th step: by SIGUSR2 to rank 1 alone (MODE=signal), or by
the batch shell's flag file, created by rank 0 (MODE=flag). Attempt 1 resumes and runs to step 40.
MODE=cadence asks for nothing: the callback saves by HPCLAUNCH_CHECKPOINT_INTERVAL_S alone."""
import gc
import os
import pathlib
import signal
import time

from lightning.pytorch import Callback, Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

from hpclaunch.train_entry.lightning_requeue import RequeueCallback

attempt = int(os.environ["HPCLAUNCH_ATTEMPT"])
mode = os.environ["MODE"]


class Ask(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if mode == "cadence":
            time.sleep(0.02)   # a step long enough for the interval to pass between checks
            return
        if attempt == 0 and trainer.global_step == 7:
            if mode == "signal" and trainer.global_rank == 1:
                os.kill(os.getpid(), signal.SIGUSR2)
            elif mode == "flag" and trainer.global_rank == 0:
                pathlib.Path(os.environ["HPCLAUNCH_REQUEUE_FLAG"]).touch()


trainer = Trainer(default_root_dir=os.environ["HPCLAUNCH_RUN_DIR"], accelerator="cpu", devices=2, strategy="ddp",
                  max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, callbacks=[Ask(), RequeueCallback(flag_interval_s=0.0)])
trainer.fit(BoringModel(), ckpt_path="hpc" if attempt else None)
print(f"attempt {attempt} rank {trainer.global_rank} finished at step {trainer.global_step}", flush=True)
del trainer
gc.collect()
