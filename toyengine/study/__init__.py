"""Studies, pure and deterministic: :mod:`.spec` (parse and validate a study file) and
:mod:`.recipe` (``run_chunk``: the toys of one chunk, no Dask)."""
