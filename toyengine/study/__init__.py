"""Studies, pure and deterministic: :mod:`.spec` (parse and validate a study file),
:mod:`.kinds` (what each study kind means), :mod:`.schema` (the per-toy record schema),
:mod:`.plan` (the :class:`~.plan.Plan` built once from a spec) and :mod:`.recipe`
(``run_chunk(plan, chunk)``: the toys of one chunk, no Dask)."""
