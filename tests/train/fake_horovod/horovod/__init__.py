"""A stand-in for horovod, used only by tests/train/test_launchers.py (1 process)."""
