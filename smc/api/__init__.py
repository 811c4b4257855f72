"""The top layer: the request value, ``generate``, ``resume`` and the command line."""
