"""The study-file format, declared once as typed models (pydantic v2).

:mod:`toyengine.study.spec` validates a parsed YAML document against :class:`StudyFile`, then
each model's ``options`` against its builder's declaration
(:class:`toyengine.models.options.BuilderOptions`), then the cross-references a schema cannot
express (see :data:`NOT_IN_SCHEMA`). :func:`study_json_schema` turns the same declarations
into the JSON Schema that ``toyengine schema`` prints.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Len
from pydantic import Field, field_validator, model_validator

from ..models.options import FiniteFloat, Pair, StrictModel, ordered_pair
from .kinds import KIND_INFO

__all__ = ["KINDS", "MAX_SEED", "MAX_TOYS", "MAX_VARIANTS", "NOT_IN_SCHEMA", "StudyFile",
           "options_markdown", "study_json_schema"]

#: study kinds and what they compute (the descriptions of :data:`~.kinds.KIND_INFO`)
KINDS = {name: k.description for name, k in KIND_INFO.items()}
#: largest root seed (stored as a 64-bit integer attribute)
MAX_SEED = 2**63 - 1
#: most toys per variant a study file may ask for (larger runs: several stores)
MAX_TOYS = 100_000_000
#: most variants (``count`` expanded) a study may have
MAX_VARIANTS = 100_000
#: most injected parameter points of one importance-sampled study (`importance.points`)
MAX_INJECTED_POINTS = 20_000

#: checks the validator makes that the JSON Schema cannot express
NOT_IN_SCHEMA = (
    "`generate`, `hypotheses`, `test.h0`/`test.h1` and variant `generate`/`models` keys name "
    "models (or hypotheses) of the same file",
    "`test.h0` and `test.h1` are required for kinds "
    + ", ".join(k.name for k in KIND_INFO.values() if k.test_required),
    "variant names are unique and variants expand to at most 100000",
    "variant option patches are checked after merging into the base model's options",
    "`poi` and `parameters` names exist in the built models",
    "a variant with `mode: fit` patches a hypothesis and not the generator, in a paired study "
    "whose kind generates toys",
    "`importance` only for kind significance, without `fit.scan`; its `inject` names are "
    "distinct models of the file other than `generate`; with `points`, `inject` names one "
    "model, the columns have one length K (numbers count as columns of K) and name its "
    "parameters, each value within the parameter's limits",
    "the `data` file exists and holds finite, non-object arrays of matching shapes",
    "option checks that involve several options (e.g. range / grid_step)",
    "the `mass1d` builder's checks inside `observable`, `parameters`, `components`, "
    "`resolution` and `discriminants` (shapes, their parameters and options; docs/models.md)",
    "options of plug-in builders (`package.module:function`, entry points), also in variant "
    "patches",
)

#: a plug-in builder ``package.module:function`` (JSON Schema pattern)
PLUGIN_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"

Name = Annotated[str, Field(min_length=1, max_length=200)]
Number = FiniteFloat


class Constraint(StrictModel):
    """A Gaussian constraint on a parameter."""

    mean: Number = Field(description="constraint mean")
    sigma: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="constraint width (> 0)")


class ParameterSetting(StrictModel):
    """Settings of one model parameter (all optional)."""

    value: Number | None = Field(None, description="start / generation value")
    limits: Pair | None = Field(None, description="fit limits [lo, hi]")
    fixed: bool | None = Field(None, description="fixed in fits")
    constraint: Constraint | None = Field(None, description="Gaussian constraint")
    step: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None, description="initial step (> 0)")

    _ordered = field_validator("limits")(lambda v: v if v is None else ordered_pair(v))


Parameters = dict[Name, Number | ParameterSetting]


class ModelEntry(StrictModel):
    """One model: a registered builder, its options, parameter overrides."""

    builder: Name = Field(description="a registered model builder, an entry point of group "
                          "toyengine.models or a plug-in 'package.module:function' (its "
                          "module allowed by the user: --plugin, toyengine.plugins.allow)")
    options: dict[str, Any] | None = Field(None, description="builder options (per builder)")
    parameters: Parameters | None = Field(None, description="parameter overrides")


class ModelPatch(StrictModel):
    """Patch of a variant to one model (deep-merged into the base model)."""

    options: dict[str, Any] | None = Field(None, description="builder options to change")
    parameters: dict[Name, Number | ParameterSetting | None] | None = Field(
        None, description="parameter overrides; null drops the base model's override of "
        "that parameter (one the variant's model does not have)")


class ScanSettings(StrictModel):
    """Per-toy scan of t over the scan parameters (look-elsewhere calibration)."""

    grid: Annotated[list[Annotated[int, Field(ge=1, le=1000)]], Len(1, 2)] = Field(
        description="points per scan parameter (1 or 2 parameters)")
    toys: int | None = Field(None, ge=1, le=MAX_TOYS, description="scan only the first N "
                             "toys (default all)")
    spacing: Annotated[list[Literal["linear", "log"]], Len(1, 2)] | None = Field(
        None, description="per scan parameter: points from its lower to its upper limit, "
        "both included, evenly (linear) or geometrically (log) spaced; default: cell "
        "centres of an even grid")


class ProfileSettings(StrictModel):
    """Starts from a coarse profile over the model's scan parameters."""

    grid: Annotated[list[Annotated[int, Field(ge=1, le=100)]], Len(1, 2)] = Field(
        description="profile points per scan parameter (1 or 2 parameters)")
    best: int = Field(2, ge=1, le=20, description="grid points (local minima of the "
                      "profile, lowest first) the full fit starts from")
    refine: int = Field(0, ge=0, le=50, description="refit the N lowest grid minima with "
                        "the scan parameters free too (still cheap) and start from the best "
                        "of those (default 0: no refit)")
    line: int = Field(0, ge=0, le=1000, description="also profile N points of the first "
                      "scan parameter with the others at their lower limit (a narrow "
                      "state's mass scan; default 0: none)")
    edges: int = Field(0, ge=0, le=200, description="also profile N cell centres along "
                       "every edge of the scan box (each scan parameter at its lower and "
                       "upper limit, the other across its range; default 0: none): minima "
                       "on a limit lie half a cell outside the grid")
    screen: int = Field(0, ge=0, le=50, description="fit the N lowest profile minima (and "
                        "the lowest edge point) briefly with every parameter free, and start "
                        "the full fits from the best of those ends (default 0: from the "
                        "profile's best points directly)")
    free: list[Name] | None = Field(None, description="parameters fitted at each profile "
                                    "point, the others at their nominal values (default: "
                                    "every free one that is not a scan parameter; in a "
                                    "nested test's alternative fit those it alone has)")

    @model_validator(mode="after")
    def _one_ranking(self) -> ProfileSettings:
        if self.refine and self.screen:
            msg = ("refine and screen are two ways to rank the profile's minima before the "
                   "full fits: give one of them")
            raise ValueError(msg)
        return self


class RestartSettings(StrictModel):
    """Brief refits from the lowest minimum with some parameters moved across their range."""

    params: Annotated[list[Name], Len(1, 20)] = Field(
        description="the parameters moved (e.g. the LASS a and r of a K pi S-wave, whose "
        "second minima no start of the signal scan reaches); each must be a parameter of "
        "a hypothesis")
    points: int = Field(4, ge=1, le=50, description="restarts per fit (low-discrepancy "
                        "points over the parameters' ranges)")


class FitSettings(StrictModel):
    """How every toy is fitted."""

    starts: int = Field(1, ge=1, le=100, description="multi-start count")
    minos: bool = Field(False, description="run MINOS")
    strategy: Literal[0, 1, 2] | None = Field(None, description="MIGRAD strategy")
    hesse: bool | None = Field(None, description="run HESSE (default: yes, except for kinds "
                               + ", ".join(k.name for k in KIND_INFO.values() if not k.hesse)
                               + ")")
    profile: ProfileSettings | None = Field(None, description="also start from the best "
                                            "points of a coarse profile over the model's "
                                            "scan parameters")
    restarts: RestartSettings | Annotated[list[RestartSettings], Len(1, 10)] | None = Field(
        None, description="after the starts, brief refits from the lowest minimum with the "
        "named parameters moved across their range (a list: each set's points in turn, e.g. "
        "the nuisances alone, then with the signal); a lower end gets a full fit; in a "
        "nested test each hypothesis is also refitted from the other's minimum")
    scan: ScanSettings | None = Field(None, description="per-toy look-elsewhere scan "
                                      "(significance only)")
    global_observables: Literal["sample", "fixed"] = Field(
        "sample", description="'sample': each toy draws its Gaussian constraints' means "
        "around the generation value (unconditional toys); 'fixed': conditional toys")


class TestSettings(StrictModel):
    """The test statistic t = 2 (nll_h0 − nll_h1)."""

    h0: Name | None = Field(None, description="null hypothesis (a hypothesis name)")
    h1: Name | None = Field(None, description="alternative hypothesis")
    ndof: int | None = Field(None, ge=1, le=10_000, description="χ² degrees of freedom")
    observed: Number | None = Field(None, description="observed value of t (or the GOF "
                                    "statistic)")


#: one parameter's values at the injected points of `importance.points`
PointColumn = Annotated[list[Number], Len(1, MAX_INJECTED_POINTS)]


class FamilySettings(StrictModel):
    """A continuous family of injected signals (``importance.family``): each injected toy is
    generated at its own signal, drawn from a density close to the signal's Jeffreys prior,
    and weighted in the extended space of data set and signal."""

    masses: Annotated[list[Name], Len(0, 10)] = Field(
        [], description="parameters drawn uniformly between their limits (e.g. the signal's "
        "mass)")
    widths: Annotated[list[Name], Len(0, 10)] = Field(
        [], description="parameters drawn with density ∝ 1/Γ² between their limits (a "
        "resonance's width: its Fisher information scales as 1/Γ²)")
    coupling: Annotated[list[Name], Len(2, 2)] = Field(
        description="real and imaginary part of the signal's complex coupling (zero in the "
        "null): phase uniform, magnitude log-normal around `strength`")
    strength: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)] = Field(
        16.0, description="expected −Δln L of the median injected signal on the null's Asimov "
        "set (½ cᵀ F c, F the coupling's Fisher information, the other parameters profiled); "
        "about a quarter to half of the t threshold of interest")
    spread: Annotated[float, Field(gt=0, le=5, allow_inf_nan=False)] = Field(
        0.25, description="standard deviation of ln |coupling| around that magnitude")


class ImportanceSettings(StrictModel):
    """Importance sampling of a significance study's toys for deep tails."""

    inject: Annotated[list[Name], Len(1, 20)] = Field(
        description="models (names in `models`) the injected share of the toys is generated "
        "from, in equal parts, e.g. a positive and a negative signal")
    fraction: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(
        0.5, description="share a of the toys generated from the injected models; the rest "
        "come from `generate` (the defensive mixture: every weight is at most 1/(1 − a))")
    points: dict[Name, Number | PointColumn] | None = Field(
        None, description="inject one model (`inject: [name]`) at K parameter points instead "
        "of K models: a column of K values per parameter (a number: the same at every point); "
        "its other parameters keep their values")
    family: FamilySettings | None = Field(
        None, description="inject one model (`inject: [name]`) at a signal drawn afresh for "
        "each toy instead of at fixed points (masses, widths, complex coupling)")


class VariantEntry(StrictModel):
    """One variant (or ``count`` random variants) of the base models."""

    name: Name = Field(description="variant name")
    group: Name | None = Field(None, description="systematic source (default: the name)")
    separate: bool = Field(False, description="reported apart from the total")
    models: dict[Name, ModelPatch] | None = Field(None, description="patches by model name")
    generate: Name | None = Field(None, description="generator model of this variant")
    count: int | None = Field(None, ge=1, le=MAX_VARIANTS, description="number of random "
                              "variants")
    mode: Literal["generate", "fit"] = Field(
        "generate", description="'generate' (default): the variant's models generate the toys "
        "and the study's hypotheses fit them; 'fit': the nominal generator's toys (paired, the "
        "same data sets as the nominal variant) are fitted with the variant's patched "
        "hypotheses — fit with the alternative")


class StudyFile(StrictModel):
    """A study file (format_version 1)."""

    format_version: Literal[1] = Field(1, description="format version")
    name: Name = Field(description="study name")
    kind: Literal[tuple(KINDS)] = Field(description="study kind")  # type: ignore[valid-type]
    description: str = Field("", max_length=100_000, description="free text")
    seed: int = Field(ge=0, le=MAX_SEED, description="root seed")
    toys: int = Field(ge=1, le=MAX_TOYS, description="toys per variant")
    models: Annotated[dict[Name, ModelEntry], Len(1, 100)] = Field(
        description="models by name")
    generate: Name = Field(description="the model that generates each toy")
    data: Name | None = Field(None, description="fixed data set (.npz) to fit instead of "
                              "generating")
    hypotheses: Name | Annotated[list[Name], Len(1, 20)] = Field(
        description="models fitted to every toy, in order")
    test: TestSettings | None = Field(None, description="test statistic")
    variants: Annotated[list[VariantEntry], Len(0, MAX_VARIANTS)] | None = Field(
        None, description="the variant axis")
    fit: FitSettings | None = Field(None, description="fit settings")
    poi: Name | Annotated[list[Name], Len(0, 1000)] | None = Field(
        None, description="parameters of interest")
    chunk_size: Literal["auto"] | Annotated[int, Field(ge=1, le=MAX_TOYS)] | None = Field(
        None, description="toys per task (default auto)")
    paired: bool = Field(True, description="common random numbers across variants (false: "
                         "independent ensembles per variant)")
    importance: ImportanceSettings | None = Field(
        None, description="generate the toys from a mixture of `generate` and injected models "
        "and weight each by the likelihood ratio (significance only)")
    reference_fit: bool | None = Field(None, description="fit each alternative generator to "
                                       "the nominal Asimov data set before generating "
                                       "(default: true for model_variation)")


def study_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of study files, with each registered builder's options
    attached to ``models.<name>.options`` by ``builder`` (if/then)."""
    from ..models import BUILDERS, known_names

    schema = StudyFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "toyengine study file"
    defs = schema.setdefault("$defs", {})
    entry = defs["ModelEntry"]
    entry["properties"]["builder"] = {
        "anyOf": [{"enum": known_names()}, {"pattern": PLUGIN_PATTERN}], "type": "string",
        "description": "a registered model builder, an installed entry point of group "
                       "toyengine.models, or a plug-in 'package.module:function' (runs only "
                       "if the user allowed its module: --plugin, toyengine.plugins.allow)"}
    branches = []
    for name, b in sorted(BUILDERS.items()):
        sub = b.options.model_json_schema(ref_template="#/$defs/{model}")
        for k, v in sub.pop("$defs", {}).items():
            defs.setdefault(k, v)
        title = b.options.__name__
        defs[title] = sub
        branches.append({"if": {"properties": {"builder": {"const": name}},
                                "required": ["builder"]},
                         "then": {"properties": {"options": {"anyOf": [
                             {"$ref": f"#/$defs/{title}"}, {"type": "null"}]}}}})
    entry["allOf"] = branches
    # a variant's option patch is merged into the base options, so it is checked (after the
    # merge) against its model's builder; here: it must fit one of the registered builders,
    # every option optional (a patch is partial). Patches of plug-in models are not covered.
    patches = []
    for _, b in sorted(BUILDERS.items()):
        title = f"{b.options.__name__}Patch"
        partial = {k: v for k, v in defs[b.options.__name__].items() if k != "required"}
        partial["title"] = title
        defs[title] = partial
        patches.append({"$ref": f"#/$defs/{title}"})
    defs["ModelPatch"]["properties"]["options"] = {
        "anyOf": [*patches, {"type": "null"}], "description": "builder options to change"}
    return schema


def options_markdown() -> str:
    """The option tables of every registered builder (the generated part of
    ``docs/study-format.md``)."""
    from ..models import BUILDERS
    from ..models.options import options_table

    parts = []
    for name, b in sorted(BUILDERS.items()):
        doc = " ".join((b.options.__doc__ or "").split())
        parts.append(f"### `builder: {name}`\n\n{doc}\n\n{options_table(b.options)}")
    return "\n\n".join(parts) + "\n"
