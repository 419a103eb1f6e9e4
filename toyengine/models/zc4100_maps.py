"""Smooth synthetic efficiency and background maps — stand-ins for the maps of
LHCb, Eur. Phys. J. C 78 (2018) 1019, Figs. 5 and 7.

The paper's maps are published only as figures, so the Zc(4100) studies use these smooth
functions of the square Dalitz plot instead (all shapes and numbers are our choice). They are
deterministic (no random numbers); the uncertainties attached to the bins mimic the statistics the
paper's histograms would have had:

- efficiency, 25 × 25 bins: binomial errors for ``N_GEN_PER_BIN`` simulated decays per bin
  (SDP-uniform simulation, the paper's Sect. 6.3 "Signal efficiency"), ≈ 7 % per bin;
- backgrounds, 10 × 10 bins, Run 1 + Run 2 merged (Sect. 6.2
  "Parametrisation of the backgrounds"): sPlot-weighted counts
  with errors ``sqrt(SPLOT_INFLATION · n)``.

Shapes: lower efficiency at high m(K+π−) (small m', a soft ηc… in this toy a smooth dip) and
towards the θ' edges; combinatorial background rising towards the SDP corners; the NR
(pp̄ non-resonant) background carrying a K*(892)-like band at m' ≈ 0.74 with a P-wave-like
angular distribution.
"""

from __future__ import annotations

import numpy as np

from ..core.dalitz.maps import SDPHistogram

__all__ = ["N_GEN_PER_BIN", "SPLOT_INFLATION", "background_maps", "efficiency_maps"]

N_GEN_PER_BIN = 16000
SPLOT_INFLATION = 2.0
EFF_BINS = (25, 25)
BKG_BINS = (10, 10)
BKG_TOTALS = {"comb": 600.0, "nr": 500.0}


def _eff_run1(mp: np.ndarray, th: np.ndarray) -> np.ndarray:
    return (0.012 * (0.6 + 0.4 * np.sin(np.pi * mp) ** 0.5)
            * (0.8 + 0.2 * np.sin(np.pi * th)) * (1.0 + 0.15 * (mp - 0.5) * np.cos(np.pi * th)))


def _eff_run2(mp: np.ndarray, th: np.ndarray) -> np.ndarray:
    return (0.015 * (0.65 + 0.35 * np.sin(np.pi * mp) ** 0.7)
            * (0.85 + 0.15 * np.sin(np.pi * th)) * (1.0 + 0.10 * mp))


def _comb(mp: np.ndarray, th: np.ndarray) -> np.ndarray:
    return (1.0 + 1.5 * (1.0 - mp) ** 2 + 0.8 * np.exp(-(((th - 0.1) / 0.15) ** 2))
            + 0.8 * np.exp(-(((th - 0.9) / 0.15) ** 2)) + 0.0 * mp)


def _nr(mp: np.ndarray, th: np.ndarray) -> np.ndarray:
    band = np.exp(-(((mp - 0.735) / 0.06) ** 2)) * (0.4 + np.cos(np.pi * th) ** 2)
    return 0.5 + 2.0 * band + 0.6 * mp + 0.0 * th


def efficiency_maps() -> dict[str, SDPHistogram]:
    """Run 1 and Run 2 efficiency stand-ins (bin averages, binomial errors)."""
    out = {}
    for run, f in (("run1", _eff_run1), ("run2", _eff_run2)):
        h = SDPHistogram.from_function(f, *EFF_BINS, "efficiency", source=f"synthetic:{run}")
        err = np.sqrt(h.values * (1.0 - h.values) / N_GEN_PER_BIN)
        out[run] = SDPHistogram(h.values, err, h.mprime_edges, h.thprime_edges, "efficiency",
                                f"synthetic:eff_{run}")
    return out


def background_maps() -> dict[str, SDPHistogram]:
    """Combinatorial and NR background stand-ins (Run 1 + Run 2 merged shapes)."""
    out = {}
    for name, f in (("comb", _comb), ("nr", _nr)):
        h = SDPHistogram.from_function(f, *BKG_BINS, "background", source=f"synthetic:{name}")
        vals = h.values * BKG_TOTALS[name] / h.values.sum()
        out[name] = SDPHistogram(vals, np.sqrt(SPLOT_INFLATION * vals), h.mprime_edges,
                                 h.thprime_edges, "background", f"synthetic:bkg_{name}")
    return out
