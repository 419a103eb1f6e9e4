"""toyengine — distributed toy studies and systematics for likelihood fits."""

__version__ = "0.1.0"
