"""Running studies on Dask: :mod:`.runner` (``run_study``) and :mod:`.cluster` (cluster
settings, TLS, dask-jobqueue submission)."""
