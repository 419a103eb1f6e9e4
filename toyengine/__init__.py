"""toyengine — distributed toy studies and systematics for likelihood fits.

>>> import toyengine
>>> spec = toyengine.load_spec("studies/tcc/pulls.yaml").with_overrides(toys=50)
>>> report = toyengine.run_study(spec, "out/pulls.zarr", workers=2)   # doctest: +SKIP
>>> ds = toyengine.open_results("out/pulls.zarr")                     # doctest: +SKIP
>>> ds.toys.pulls()                                                   # doctest: +SKIP

Layers (docs: ARCHITECTURE): core (params, lineshapes, model1d, fit) → study (spec,
recipe.run_chunk) → run (runner, Dask) → store (zarr/xarray) → summary → cli.
"""

__version__ = "0.1.0"

from .core.fit import FitResult, fit  # noqa: E402
from .core.params import Constraint, Parameter, ParameterSet  # noqa: E402
from .errors import ModelError, SpecError, StoreError, ToyEngineError  # noqa: E402
from .run.runner import RunReport, run_study  # noqa: E402
from .store import open_results  # noqa: E402
from .study.recipe import Chunk, run_chunk  # noqa: E402
from .study.spec import StudySpec, load_spec  # noqa: E402

__all__ = [
    "Chunk",
    "Constraint",
    "FitResult",
    "ModelError",
    "Parameter",
    "ParameterSet",
    "RunReport",
    "SpecError",
    "StoreError",
    "StudySpec",
    "ToyEngineError",
    "__version__",
    "fit",
    "load_spec",
    "open_results",
    "run_chunk",
    "run_study",
]


def __dir__() -> list[str]:
    return list(__all__)
