"""tensorflow: srun starts one worker per rank, each with a TF_CONFIG naming every worker and its own
index, so tf.distribute.MultiWorkerMirroredStrategy() needs no arguments. templates/tensorflow.j2."""
from __future__ import annotations

NAME = "tensorflow"
RANK_ENV = "srun"
STARTER = ("[python, train.py]", "srun starts one worker per rank, each with a TF_CONFIG naming every worker and its "
           "own index: tf.distribute.MultiWorkerMirroredStrategy() needs no arguments")
