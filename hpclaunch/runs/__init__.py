"""The runs layer: the registry, submission and the job handle, over the backends."""
