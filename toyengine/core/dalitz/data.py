"""Specifications and data of a Dalitz-plot fit: isobar components, subsamples (runs) and
their events, for the likelihood of LHCb, Eur. Phys. J. C 78 (2018) 1019, Eq. 14.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ...errors import ModelError
from .maps import SDPHistogram
from .resonances import Lineshape


# ---------------------------------------------------------------------------------------
# Specifications
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Component:
    """One isobar component: a lineshape in a pair, its parameter names and coefficient.

    Parameters
    ----------
    name : str
        Component name; the coefficient parameters are ``re_<name>``/``im_<name>``
        (cartesian) or ``mag_<name>``/``ph_<name>`` (polar).
    lineshape : Lineshape
        Kind, pair, spin and barrier radius.
    params : tuple of str
        Names of the lineshape parameters in the model's ParameterSet, in the order of
        :data:`toyengine.core.dalitz.resonances.KINDS` (mass and width in MeV; a, r in GeV⁻¹).
    """

    name: str
    lineshape: Lineshape
    params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.params) != self.lineshape.n_params:
            msg = (f"component {self.name!r}: lineshape {self.lineshape.kind!r} needs "
                   f"{self.lineshape.n_params} parameter names, got {self.params}")
            raise ModelError(msg)

    @property
    def pair(self) -> str:
        return self.lineshape.pair

    @property
    def spin(self) -> int:
        return self.lineshape.spin


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One subsample: efficiency map, background maps and yield parameter names.

    Parameters
    ----------
    name : str
        e.g. ``"run1"``.
    efficiency : SDPHistogram
        Efficiency map on the SDP (kind ``"efficiency"``).
    signal_yield : str
        Name of the signal-yield parameter.
    backgrounds : tuple of (name, SDPHistogram, yield parameter name)
        Background components with their SDP maps.
    """

    name: str
    efficiency: SDPHistogram
    signal_yield: str
    backgrounds: tuple[tuple[str, SDPHistogram, str], ...] = ()


@dataclass(frozen=True)
class RunSample:
    """Events of one subsample: ``m2_kpi = m²(K+π−)``, ``m2_etacpi = m²(ηc π−)`` in GeV²;
    ``label`` is the generating component (0 = signal, k = k-th background; −1 unknown)."""

    m2_kpi: np.ndarray
    m2_etacpi: np.ndarray
    label: np.ndarray | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.m2_kpi, float).ravel()
        y = np.asarray(self.m2_etacpi, float).ravel()
        if x.shape != y.shape:
            msg = f"RunSample: m2_kpi and m2_etacpi differ in length ({x.size} vs {y.size})"
            raise ModelError(msg)
        object.__setattr__(self, "m2_kpi", x)
        object.__setattr__(self, "m2_etacpi", y)
        if self.label is not None:
            lab = np.asarray(self.label).astype(np.int16).ravel()
            if lab.shape != x.shape:
                msg = "RunSample: label must have one entry per event"
                raise ModelError(msg)
            object.__setattr__(self, "label", lab)

    def __len__(self) -> int:
        return int(self.m2_kpi.size)


@dataclass(frozen=True)
class DalitzData:
    """A data set: one :class:`RunSample` per subsample, keyed by run name."""

    runs: dict[str, RunSample] = field(default_factory=dict)

    @property
    def n_events(self) -> int:
        return sum(len(r) for r in self.runs.values())

    def __getitem__(self, run: str) -> RunSample:
        return self.runs[run]

    def save_npz(self, path: str, weights: Mapping[str, np.ndarray] | None = None,
                 **meta: object) -> None:
        """Write ``<run>/m2_kpi``, ``<run>/m2_etacpi`` (and labels, and ``<run>/weight``
        for a weighted set such as the Asimov one) plus metadata strings."""
        arrays: dict[str, np.ndarray] = {}
        for name, rs in self.runs.items():
            arrays[f"{name}/m2_kpi"] = rs.m2_kpi
            arrays[f"{name}/m2_etacpi"] = rs.m2_etacpi
            if rs.label is not None:
                arrays[f"{name}/label"] = rs.label
            if weights is not None:
                arrays[f"{name}/weight"] = np.asarray(weights[name], dtype=float)
        for k, v in meta.items():
            arrays[f"meta/{k}"] = np.array(str(v))
        np.savez_compressed(path, **arrays)

    @classmethod
    def load_npz(cls, path: str) -> DalitzData:
        """Read a data set written by :meth:`save_npz`."""
        import os

        if not os.path.isfile(path):
            msg = f"Dalitz data file {path}: file not found"
            raise ModelError(msg)
        with np.load(path, allow_pickle=False) as f:
            keys = list(f.files)
            runs: dict[str, RunSample] = {}
            if any(k.endswith("/weight") for k in keys):
                msg = (f"Dalitz data file {path}: holds weighted events (an Asimov data "
                       "set); a study's data: file must be unweighted")
                raise ModelError(msg)
            names = sorted({k.split("/")[0] for k in keys if k.endswith("/m2_kpi")})
            if not names:
                msg = f"Dalitz data file {path}: no '<run>/m2_kpi' arrays found (keys: {keys})"
                raise ModelError(msg)
            for n in names:
                if f"{n}/m2_etacpi" not in keys:
                    msg = f"Dalitz data file {path}: run {n!r} lacks 'm2_etacpi'"
                    raise ModelError(msg)
                lab = f[f"{n}/label"] if f"{n}/label" in keys else None
                runs[n] = RunSample(f[f"{n}/m2_kpi"], f[f"{n}/m2_etacpi"], lab)
        return cls(runs)

