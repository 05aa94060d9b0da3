"""tensorflow: srun starts one worker per rank, each with a TF_CONFIG naming every worker and its own
index, so tf.distribute.MultiWorkerMirroredStrategy() needs no arguments. templates/tensorflow.j2 gives
the job's shape to the job runtime's hl_tensorflow (hpclaunch/runtime/job.sh: the ports, TF_CONFIG, the step)."""
from __future__ import annotations

NAME = "tensorflow"
RANK_ENV = "srun"
STARTER = ("[python, train.py]", "srun starts one worker per rank, each with a TF_CONFIG naming every worker and its "
           "own index: tf.distribute.MultiWorkerMirroredStrategy() needs no arguments")
