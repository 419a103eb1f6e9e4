"""toyengine — distributed toy studies and systematics for likelihood fits.

>>> import toyengine
>>> spec = toyengine.load_spec("studies/tcc/pulls.yaml").with_overrides(toys=50)
>>> report = toyengine.run_study(spec, "out/pulls.zarr", workers=2)   # doctest: +SKIP
>>> ds = toyengine.open_results("out/pulls.zarr")                     # doctest: +SKIP
>>> ds.toys.pulls()                                                   # doctest: +SKIP
>>> data = toyengine.toy_data(spec, toy=3)      # the data set toy 3 fitted  # doctest: +SKIP

Everything else is reachable by module, one folder per layer (imports point down only):
:mod:`toyengine.core` (parameters, lineshapes, the 1-D and Dalitz models, the fitter) ←
:mod:`toyengine.models` (builders) ← :mod:`toyengine.study` (spec, ``recipe.run_chunk``) ←
:mod:`toyengine.run` (Dask) → :mod:`toyengine.store` (zarr/xarray); :mod:`toyengine.summary`
reads Datasets; :mod:`toyengine.cli` sits on top. ``docs/modules.md`` is the map.
"""

from typing import TYPE_CHECKING, Any

from ._version import __version__

# Public names and the module that defines each. They are imported on first use (PEP 562
# module __getattr__), so ``import toyengine`` and ``toyengine --help`` do not pay for
# Dask, zarr, xarray or iminuit before something needs them.
_LAZY = {
    "FitResult": "core.fit",
    "fit": "core.fit",
    "Constraint": "core.params",
    "Parameter": "core.params",
    "ParameterSet": "core.params",
    "ModelError": "errors",
    "SpecError": "errors",
    "StoreError": "errors",
    "ToyEngineError": "errors",
    "RunReport": "run.runner",
    "run_study": "run.runner",
    "open_results": "store",
    "StudySpec": "study.spec",
    "load_spec": "study.spec",
    "toy_data": "study.recipe",
}
#: names that hand out Datasets: loading them registers the ``ds.toys`` accessor too
_WITH_ACCESSOR = frozenset({"open_results", "run_study"})

if TYPE_CHECKING:
    from .core.fit import FitResult, fit
    from .core.params import Constraint, Parameter, ParameterSet
    from .errors import ModelError, SpecError, StoreError, ToyEngineError
    from .run.runner import RunReport, run_study
    from .store import open_results
    from .study.recipe import toy_data
    from .study.spec import StudySpec, load_spec


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'toyengine' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    if name in _WITH_ACCESSOR:
        importlib.import_module(".summary", __name__)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


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
    "toy_data",
]


def __dir__() -> list[str]:
    return list(__all__)
