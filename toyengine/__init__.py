"""toyengine — distributed toy studies and systematics for likelihood fits.

>>> import toyengine
>>> spec = toyengine.load_spec("studies/tcc/pulls.yaml").with_overrides(toys=50)
>>> report = toyengine.run_study(spec, "out/pulls.zarr", workers=2)   # doctest: +SKIP
>>> ds = toyengine.open_results("out/pulls.zarr")                     # doctest: +SKIP
>>> ds.toys.pulls()                                                   # doctest: +SKIP

Everything else is reachable by module, one folder per layer (imports point down only):
:mod:`toyengine.core` (parameters, lineshapes, the 1-D and Dalitz models, the fitter) ←
:mod:`toyengine.models` (builders) ← :mod:`toyengine.study` (spec, ``recipe.run_chunk``) ←
:mod:`toyengine.run` (Dask) → :mod:`toyengine.store` (zarr/xarray); :mod:`toyengine.summary`
reads Datasets; :mod:`toyengine.cli` sits on top. ``docs/modules.md`` is the map.
"""

from . import summary as _summary  # noqa: F401  (registers the ``ds.toys`` accessor)
from ._version import __version__
from .core.fit import FitResult, fit  # noqa: E402
from .core.params import Constraint, Parameter, ParameterSet  # noqa: E402
from .errors import ModelError, SpecError, StoreError, ToyEngineError  # noqa: E402
from .run.runner import RunReport, run_study  # noqa: E402
from .store import open_results  # noqa: E402
from .study.spec import StudySpec, load_spec  # noqa: E402

__all__ = [
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
    "run_study",
]


def __dir__() -> list[str]:
    return list(__all__)
