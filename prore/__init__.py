"""The ``prore`` command line: composes the subcommands of ``indexing``, ``serving`` and ``rl``."""
