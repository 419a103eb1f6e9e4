"""Variants that fit the nominal toys with their own model (``mode: fit``, "fit with the
alternative"): validation, the data they fit, the paired shift and the summary."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from toyengine import open_results, run_study
from toyengine.core.fit import fit
from toyengine.errors import DegenerateVariantWarning, SpecError
from toyengine.study.recipe import toy_data, toy_nll_function
from toyengine.study.reference import check_degenerate, generator_model
from toyengine.study.spec import StudySpec, build_model
from toyengine.summary import systematic_table

BASE = """\
name: tcc-fit-mode-small
kind: model_variation
seed: 11
toys: 8
models:
  default:
    builder: tcc
    options: {range: [-4.0, 11.0]}
  truth:
    builder: tcc
    options: {range: [-4.0, 11.0]}
generate: truth
hypotheses: [default]
poi: [delta_m, gamma]
"""

VARIANTS = """\
variants:
  - name: nominal
    group: nominal
  - name: L=0 fit
    group: J^P fitted
    separate: true
    mode: fit
    models:
      default: {options: {L: 0}}
  - name: L=0
    group: J^P generated
    separate: true
    models:
      truth: {options: {L: 0}}
"""


def _spec(text: str = BASE + VARIANTS) -> StudySpec:
    return StudySpec.from_text(text, "fit_mode.yaml", ".")


@pytest.fixture(scope="module")
def store(tmp_path_factory, client):
    path = tmp_path_factory.mktemp("fitmode") / "s.zarr"
    assert run_study(_spec(), path, client=client, chunk_size=3, progress=None).complete
    return path


def test_mode_is_parsed_and_enters_the_digest_only_when_set() -> None:
    spec = _spec()
    assert [v.mode for v in spec.variants] == ["generate", "fit", "generate"]
    assert [v.fits_alternative for v in spec.variants] == [False, True, False]
    explicit = _spec(BASE + VARIANTS.replace("    group: nominal\n",
                                             "    group: nominal\n    mode: generate\n"))
    assert explicit.digest == spec.digest  # the default mode leaves the digest as before
    other = _spec(BASE + VARIANTS.replace("    mode: fit\n", ""))
    assert other.digest != spec.digest


@pytest.mark.parametrize(("text", "match"), [
    (BASE + "paired: false\n" + VARIANTS, "needs paired: true"),
    (BASE + VARIANTS.replace("      default: {options: {L: 0}}",
                             "      truth: {options: {L: 0}}"), "leaves the generator"),
    (BASE.replace("generate: truth", "generate: default") + VARIANTS.replace(
        "      truth: {options: {L: 0}}", "      default: {options: {L: 2}}"),
     "leaves the generator"),
    (BASE + VARIANTS.replace("      default: {options: {L: 0}}",
                             "      default: {options: {}}"), "patches that change a hypothesis"),
    (BASE + VARIANTS.replace("    group: nominal\n", "    group: nominal\n    mode: fit\n"),
     "first variant is the nominal"),
    (BASE + VARIANTS.replace("mode: fit", "mode: fitted"), "variants"),
])
def test_bad_fit_mode_is_one_clear_error(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match) as exc:
        _spec(text)
    assert "\n" not in str(exc.value)
    assert "mode" in str(exc.value)


def test_fit_mode_variant_generates_the_nominal_data_and_is_not_degenerate() -> None:
    spec = _spec()
    nominal, alt = spec.variants[0], spec.variants[1]
    # the generator is the nominal one (no reference fit: it is not an alternative generator)
    assert generator_model(spec, alt) is generator_model(spec, nominal)
    for t in range(3):
        np.testing.assert_array_equal(toy_data(spec, t, 1), toy_data(spec, t, 0))
    # the fitted model is the patched one
    assert build_model(spec, alt, "default") is not build_model(spec, nominal, "default")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateVariantWarning)
        assert check_degenerate(spec) == ()


def test_fit_mode_store_fits_the_nominal_toys_with_the_alternative(store) -> None:
    spec = _spec()
    ds = open_results(store)
    assert json.loads(ds.attrs["fit_variants"]) == ["L=0 fit"]
    np.testing.assert_array_equal(ds["n_events"].sel(variant=1), ds["n_events"].sel(variant=0))
    # the generated-mode variant draws other data (another model, the same random numbers)
    assert not np.array_equal(ds["n_events"].sel(variant=2), ds["n_events"].sel(variant=0))
    # the stored fit of the fit-mode variant is the L = 0 model's fit to the nominal toy
    model = build_model(spec, spec.variants[1], "default")
    names = list(model.parameters.names)
    for t in (0, 5):
        res = fit(toy_nll_function(spec, t, "default", 1), model.parameters)
        got = ds["value"].sel(variant=1, toy=t, hypothesis="default", param=names).values
        np.testing.assert_allclose(got, res.values, rtol=0, atol=1e-5)
        assert float(ds["nll"].sel(variant=1, toy=t, hypothesis="default")) == pytest.approx(
            res.nll, abs=1e-6)


def test_fit_mode_shift_is_the_mean_paired_difference(store) -> None:
    ds = open_results(store)
    st = systematic_table(ds, n_bootstrap=0)
    vs = next(v for v in st.variants if v.name == "L=0 fit")
    assert vs.mode == "fit" and vs.same_as == ""
    assert next(v for v in st.variants if v.name == "L=0").mode == "generate"
    vals = ds["value"].sel(hypothesis="default")
    ok = (ds["valid"].sel(hypothesis="default", variant=1)
          & ds["valid"].sel(hypothesis="default", variant=0)).values
    diffs = {}
    for p in ("delta_m", "gamma"):
        diff = (vals.sel(variant=1, param=p) - vals.sel(variant=0, param=p)).values[ok]
        assert vs.shift[p] == pytest.approx(diff.mean(), rel=1e-12)
        assert vs.stat[p] == pytest.approx(diff.std(ddof=1) / np.sqrt(diff.size), rel=1e-12)
        diffs[p] = diff
    # an S-wave fit of P-wave data gives a larger δm_BW and a smaller Γ_BW (Nature Physics
    # 18 (2022) 751, Methods), and it does so toy by toy: the sign is not toy noise
    assert ok.sum() == 8
    assert (diffs["delta_m"] > 0).all() and (diffs["gamma"] < 0).all()
    txt = st.to_text(detail=True)
    assert "L=0 fit [fit]" in txt and "fit with the alternative" in txt


def test_show_lists_the_mode_of_every_variant() -> None:
    from toyengine.study.show import describe_study

    text = describe_study(_spec())
    assert text.count("mode: fit") == 1 and text.count("mode: generate") == 2
