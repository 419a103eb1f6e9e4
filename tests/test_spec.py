"""Study-file validation: one error naming the field, non-zero exit, no store (issue 3)."""

from pathlib import Path

import pytest

from toyengine.errors import SpecError
from toyengine.study.spec import StudySpec

DATA = Path(__file__).parent / "data"
GOOD = (DATA / "tcc_small.yaml").read_text()

BAD = {
    "unknown top-level key": (GOOD + "colour: blue\n", "colour", "no such key"),
    "toys zero": (GOOD.replace("toys: 24", "toys: 0"), "toys", ">= 1"),
    "toys negative": (GOOD.replace("toys: 24", "toys: -5"), "toys", ">= 1"),
    "toys wrong type": (GOOD.replace("toys: 24", "toys: many"), "toys", "an integer"),
    "unknown kind": (GOOD.replace("kind: pulls", "kind: pullz"), "kind", "one of"),
    "unknown builder": (GOOD.replace("builder: tcc", "builder: tcx"),
                        "models.nominal.builder", "registered model builders"),
    "unknown model in hypotheses": (GOOD.replace("hypotheses: [nominal]", "hypotheses: [h1]"),
                                    "hypotheses[0]", "model names"),
    "unknown parameter": (GOOD.replace("options: {range: [-4.0, 11.0]}",
                                       "options: {range: [-4.0, 11.0]}\n    parameters: {mass: 1}"),
                          "models.nominal", "mass"),
    "unknown model option": (GOOD.replace("options: {range: [-4.0, 11.0]}",
                                          "options: {rnage: [-4.0, 11.0]}"),
                             "models.nominal", "rnage"),
    "bad fit option type": (GOOD.replace("fit: {starts: 3}", "fit: {starts: 'x'}"),
                            "fit.starts", "an integer"),
    "missing seed": (GOOD.replace("seed: 7\n", ""), "seed", "required"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_names_the_field(case):
    text, field, expected = BAD[case]
    with pytest.raises(SpecError) as err:
        StudySpec.from_text(text, "bad.yaml", str(DATA))
    msg = str(err.value)
    assert field in msg and expected in msg, msg


@pytest.mark.parametrize("case", ["toys zero", "unknown kind", "unknown parameter"])
def test_cli_bad_spec_exit_code_and_no_store(tmp_path, case, cli):
    text, field, _ = BAD[case]
    study = tmp_path / "bad.yaml"
    study.write_text(text)
    store = tmp_path / "out.zarr"
    res = cli("run", study, "--store", store)
    assert res.returncode == 2
    assert field in res.stderr and "invalid study file" in res.stderr
    assert not store.exists()


def test_cli_override_validated(tmp_path, cli):
    res = cli("run", DATA / "tcc_small.yaml", "--store", tmp_path / "x.zarr", "--toys", "0")
    assert res.returncode == 2 and "--toys: 0 is not >= 1" in res.stderr
    assert not (tmp_path / "x.zarr").exists()


def test_digest_ignores_toy_count_but_not_seed():
    a = StudySpec.from_text(GOOD, "a", str(DATA))
    assert a.digest == a.with_overrides(toys=1000).digest
    assert a.digest != a.with_overrides(seed=8).digest


def test_reference_studies_validate():
    from toyengine.study.spec import load_spec

    root = Path(__file__).parent.parent / "studies"
    files = sorted(root.glob("tcc/*.yaml"))
    assert files
    for f in files:
        load_spec(f)


def test_zc4100_studies_validate_and_one_toy_runs():
    """Every Z_c study file validates (models built); one significance toy runs end to end."""
    import numpy as np

    from toyengine.core.fit import FitStatus
    from toyengine.study.plan import Chunk, Plan
    from toyengine.study.recipe import run_chunk
    from toyengine.study.spec import load_spec

    root = Path(__file__).parent.parent / "studies" / "zc4100"
    files = sorted(root.glob("*.yaml"))
    # with declared_significance.yaml (the dalitz builder) and significance_importance.yaml
    assert len(files) == 9
    specs = {f.stem: load_spec(f) for f in files}
    from toyengine.study.plan import check_importance

    check_importance(specs["significance_importance"])  # its family can be drawn
    res = run_chunk(Plan.of(specs["significance"]), Chunk(0, 0, 0, 1))
    # both fits (H0, H1) ran and converged: a fit that raised would be FitStatus.EXCEPTION
    # with NaN −ln L, an unconverged one FitStatus.INVALID
    assert res.arrays["status"].tolist() == [[FitStatus.VALID, FitStatus.VALID]]
    assert np.all(np.isfinite(res.arrays["nll"]))
    assert np.all(res.arrays["n_events"] > 1000)


def _counting_gauss(calls, build_every_variant=False):
    """The gauss builder, counting its builds, declared as expensive to build (as the
    Dalitz builders are) unless ``build_every_variant``."""
    from toyengine.models import BUILDERS, register_builder
    from toyengine.models.gauss import GaussOptions

    original = BUILDERS["gauss"]

    class Options(GaussOptions):
        pass

    Options.build_every_variant = build_every_variant

    def build(options, rng=None):
        calls.append(dict(options))
        return original.build(options, rng)

    register_builder("gauss", build, Options)
    return original


_VARIANTS_STUDY = """
name: lazy-validation
kind: model_variation
seed: 5
toys: 4
models:
  g: {builder: gauss, options: {events: 37}}
generate: g
hypotheses: [g]
poi: [POI]
variants:
  - {name: nominal, group: nominal}
""" + "".join(f"  - {{name: v{i}, group: width, models: {{g: {{options: {{sigma: 1.{i}7}}}}}}}}\n"
              for i in range(5))


def test_validation_builds_only_the_nominal_models():
    """Variants that only change declared options are checked against the declaration,
    not built (a Dalitz variant costs a normalisation grid); a poi not among the nominal
    parameters makes every variant be built before the study is refused."""
    from toyengine.models import BUILDERS

    calls: list[dict] = []
    original = _counting_gauss(calls)
    try:
        spec = StudySpec.from_text(_VARIANTS_STUDY.replace("POI", "mu"))
        assert len(spec.variants) == 6
        assert calls == [{"events": 37}]
        with pytest.raises(SpecError, match=r"poi\[0\]"):
            StudySpec.from_text(_VARIANTS_STUDY.replace("POI", "nope"))
        assert len(calls) == 1 + 5  # the nominal one was cached; the five variants built
        with pytest.raises(SpecError, match=r"variants\[1\].*sigma"):
            StudySpec.from_text(_VARIANTS_STUDY.replace("sigma: 1.07", "sigma: -1"))
    finally:
        BUILDERS["gauss"] = original


def test_cheap_builders_build_every_variant():
    """A builder that does not declare itself expensive has every variant's model built
    when the study is checked, so that its cross-field checks fail before a toy."""
    from toyengine.models import BUILDERS

    calls: list[dict] = []
    original = _counting_gauss(calls, build_every_variant=True)
    try:
        # events: 38, a study of its own (models built before are cached by their options)
        StudySpec.from_text(_VARIANTS_STUDY.replace("POI", "mu").replace("37", "38"))
        assert len(calls) == 6
    finally:
        BUILDERS["gauss"] = original
