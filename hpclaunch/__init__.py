"""hpclaunch: run distributed training on Slurm clusters, and account for its energy and heat."""

__version__ = "0.1.0"
