"""The version of fedlab, at the bottom of the package: the run key, checkpoints and the environment
record import it from here (not back up from ``fedlab/__init__.py``)."""
__version__ = "0.4.0"
