"""What each study kind means, in one table (:data:`KIND_INFO`).

The validator reads it (which kinds need ``test.h0``/``test.h1``, the defaults of
``fit.hesse`` and ``reference_fit``, where ``fit.scan`` is allowed), the recipe (the nested
test's fitting order and starts, the GOF statistic), the live progress and the summaries
(which tables and plots apply, in what order). The summaries find a store's entry by its
``kind`` attribute; a Dataset whose kind is not in the table (a synthetic one) gets
:data:`UNKNOWN_KIND`, which decides everything from the data present.

The test statistic is t = 2 (nll_h0 − nll_h1). Nested hypotheses (H0 a special case of H1)
give t ≥ 0 and the χ² asymptotics of Wilks, Ann. Math. Statist. 9 (1938) 60; separate
(non-nested) hypotheses, such as two J^P assignments, give t of either sign (Cox, Proc.
Fourth Berkeley Symp. 1 (1961) 105), and a χ² with one degree of freedom is an assumption
checked with toys (LHCb, Eur. Phys. J. C 78 (2018) 1019, the J^P rejection of the Z_c).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["KIND_INFO", "SECTIONS", "UNKNOWN_KIND", "KindInfo", "kind_info"]

#: summary sections in the order of a study that is not a systematic one (``bookkeeping``
#: always last); a systematic study puts its systematic tables first
SECTIONS = ("significance", "gof", "systematics", "shift_definitions", "variations", "pulls",
            "ensembles", "bookkeeping")
_SYSTEMATIC_ORDER = ("systematics", "shift_definitions", "variations", "significance", "pulls",
                     "ensembles", "gof", "bookkeeping")


@dataclass(frozen=True)
class KindInfo:
    """The rules of one study kind.

    Attributes
    ----------
    name, description : str
        The kind as a study file writes it, and what it does (``toyengine schema``).
    toy_test : bool
        Every toy is fitted with H0 and H1 and the toy distribution of t is the result
        (significance, J^P rejection).
    test_required : bool
        ``test.h0`` and ``test.h1`` must be given.
    nested : bool
        When the study tests H0 against H1, H0 is nested in H1 (t ≥ 0 up to the minimiser
        tolerance, χ² asymptotics); False for separate hypotheses (t of either sign, Wilks
        ndof 1 by convention).
    one_data_set : bool
        Every variant refits the study's one data set (``data``) rather than generated toys.
    systematic : bool
        The variants are systematic sources: the summary leads with the systematic table.
    random_draws : bool
        The variants are random draws of one source (smeared templates, parameter draws):
        their shifts combine as an RMS, not a maximum.
    hesse : bool
        Default of ``fit.hesse`` (the summaries of toy tests read only −ln L and values).
    reference_fit : bool
        Default of ``reference_fit`` (alternative generators first fitted to the nominal
        Asimov data set; LHCb, Nature Physics 18 (2022) 751, Methods).
    records_gof : bool
        The models' goodness-of-fit statistic is recorded per toy (``gof``).
    """

    name: str
    description: str
    toy_test: bool = False
    test_required: bool = False
    nested: bool = True
    one_data_set: bool = False
    systematic: bool = False
    random_draws: bool = False
    hesse: bool = True
    reference_fit: bool = False
    records_gof: bool = False

    @property
    def nested_test(self) -> bool:
        """A toy test of nested hypotheses: the H1 fit of every toy also starts from the H0
        minimum, an H1 fit whose signal ends at zero takes the H0 −ln L (t = 0), and a
        look-elsewhere scan (``fit.scan``) is possible."""
        return self.toy_test and self.nested

    @property
    def sections(self) -> tuple[str, ...]:
        """The summary sections that may apply, in the order they are shown."""
        order = _SYSTEMATIC_ORDER if self.systematic else SECTIONS
        drop = {"systematics", "shift_definitions"} if not self.systematic else set()
        if not self.one_data_set:
            drop.add("variations")
        if not self.records_gof:
            drop.add("gof")
        return tuple(s for s in order if s not in drop)


_KINDS = (
    KindInfo("pulls", "generate from the nominal model, fit it: pull mean/width, bias, "
             "coverage"),
    KindInfo("fit_bias", "same as pulls (pseudoexperiments from the nominal fit)"),
    KindInfo("significance", "generate under H0, fit H0 and H1: t = Δ(−2 ln L) vs χ²(ndof)",
             toy_test=True, test_required=True, hesse=False),
    KindInfo("jp_rejection", "generate under the disfavoured J^P, fit both: rejection level",
             toy_test=True, test_required=True, nested=False, hesse=False),
    KindInfo("model_variation", "generate from alternative models, fit the default: shifts "
             "per source", systematic=True, reference_fit=True),
    KindInfo("template_smearing", "fixed data set, smeared templates per variant, fit H0 and "
             "H1", test_required=True, one_data_set=True, systematic=True, random_draws=True),
    KindInfo("parameter_variation", "fixed data set, random draws of fixed parameters per "
             "variant", one_data_set=True, systematic=True, random_draws=True),
    KindInfo("goodness_of_fit", "generate from nominal, fit nominal: toy-based p-value of a "
             "GOF statistic", records_gof=True),
    KindInfo("cross_check", "generate with one model, fit with another (e.g. U vs BW "
             "ensembles)"),
)

#: every study kind by name, in the order ``toyengine schema`` lists them
KIND_INFO: Mapping[str, KindInfo] = MappingProxyType({k.name: k for k in _KINDS})

#: the rules of a Dataset whose kind is unknown (e.g. synthetic): every section the data
#: allow, no kind-specific table
UNKNOWN_KIND = KindInfo("", "unknown kind")


def kind_info(name: str) -> KindInfo:
    """The entry of :data:`KIND_INFO` for ``name``, :data:`UNKNOWN_KIND` if there is none."""
    return KIND_INFO.get(str(name), UNKNOWN_KIND)
