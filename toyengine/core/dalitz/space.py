"""Whether two Dalitz models describe the same data space: what an importance-sampling
likelihood ratio between them needs.

A toy generated from an injected model and weighted by ``p_0(data) / p_inj(data)`` is an
unbiased draw of the null model only if both densities live on the same space with the same
support (Owen, *Monte Carlo theory, methods and examples* (2013), Ch. 9, Eq. 9.3): the same
masses (hence the same Dalitz plot and square-Dalitz-plot map, Eur. Phys. J. C 78 (2018)
1019, Eqs. 15–16), the same vetoes, the same runs with the same efficiency maps, and the same
background maps in the same order. Couplings, line shapes and yields may differ: they are
what the weights correct for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .maps import SDPHistogram
    from .protocol import DalitzModelView

__all__ = ["space_mismatch"]


def _same_map(a: SDPHistogram, b: SDPHistogram) -> bool:
    return a is b or (np.array_equal(a.values, b.values)
                      and np.array_equal(a.mprime_edges, b.mprime_edges)
                      and np.array_equal(a.thprime_edges, b.thprime_edges))


def space_mismatch(a: DalitzModelView, b: DalitzModelView) -> str | None:
    """The first difference between the data spaces of Dalitz models ``a`` and ``b`` (one
    phrase naming it), or None when they share masses, vetoes, runs and maps."""
    if a.kin != b.kin:
        return f"other particle masses ({b.kin} instead of {a.kin})"
    if a.vetoes != b.vetoes:
        return f"other vetoes ({b.vetoes} instead of {a.vetoes})"
    if a.run_names != b.run_names:
        return f"other runs ({list(b.run_names)} instead of {list(a.run_names)})"
    for ra, rb in zip(a.runs, b.runs, strict=True):
        if not _same_map(ra.efficiency, rb.efficiency):
            return (f"another efficiency map in run {ra.name!r} ({rb.efficiency.source} "
                    f"instead of {ra.efficiency.source})")
        na, nb = [n for n, _, _ in ra.backgrounds], [n for n, _, _ in rb.backgrounds]
        if na != nb:
            return f"other backgrounds in run {ra.name!r} ({nb} instead of {na})"
        for (n, ha, _), (_, hb, _) in zip(ra.backgrounds, rb.backgrounds, strict=True):
            if not _same_map(ha, hb):
                return (f"another {n!r} background map in run {ra.name!r} ({hb.source} "
                        f"instead of {ha.source})")
    return None
