"""The declarative ``dalitz`` builder: the Z_c(4100)⁻ model of LHCb, Eur. Phys. J. C 78
(2018) 1019, declared in a study file, against the ``zc4100`` builder; and the one-line
errors of a bad declaration."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from toyengine.core.fit import fit
from toyengine.errors import ModelError
from toyengine.models.dalitz import build_dalitz
from toyengine.models.zc4100 import STUDY_DIR, build_zc4100
from toyengine.study.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DECLARED = ROOT / "studies" / "zc4100" / "declared_significance.yaml"


def _declared(hypothesis: str) -> dict:
    """Options of model H0 (baseline) or H1 (nominal) of the declared study, maps read
    from studies/zc4100 whatever the working directory."""
    spec = load_spec(DECLARED)
    opts = copy.deepcopy(spec.model_config(spec.variants[0], hypothesis)["options"])
    opts["map_dir"] = str(STUDY_DIR)
    return opts


@pytest.mark.parametrize(("hyp", "zc_opts"), [("H0", {"hypothesis": "baseline"}),
                                              ("H1", {"hypothesis": "nominal"})])
def test_declared_zc4100_equals_builder(hyp: str, zc_opts: dict) -> None:
    """Same parameters (names, values, limits, constraints, steps), bit-identical −ln L at
    the generation point and at a shifted point on toys of the nominal model, and identical
    fitted values (the same minimiser on the same function)."""
    ref = build_zc4100(zc_opts)
    dec = build_dalitz(_declared(hyp))
    assert dec.parameters.params == ref.parameters.params
    assert dec.scan_parameters == ref.scan_parameters
    gen = build_zc4100({"hypothesis": "nominal"})
    x0 = ref.parameters.values
    x1 = x0.copy()
    free = [i for i, p in enumerate(ref.parameters) if not p.fixed]
    x1[free] += 0.01
    for seed in (1, 2):
        data = gen.sample(gen.parameters.values, np.random.default_rng(seed))
        n_ref, n_dec = ref.nll(data), dec.nll(data)
        for x in (x0, x1):
            assert n_dec(x) == n_ref(x)
        np.testing.assert_array_equal(n_dec.grad(x1), n_ref.grad(x1))
    r_ref = fit(ref.nll(data), ref.parameters)
    r_dec = fit(dec.nll(data), dec.parameters)
    np.testing.assert_array_equal(r_dec.values, r_ref.values)
    assert r_dec.nll == r_ref.nll


def test_declared_zc4100_smearing_equals_builder() -> None:
    """An efficiency-smearing variant (same rng): the same smeared maps, so the same −ln L."""
    ref = build_zc4100({"hypothesis": "nominal", "smearing": "efficiency_correlated",
                        "smearing_bins": 10, "smearing_radius": 2}, np.random.default_rng(7))
    opts = _declared("H1") | {"smearing": "efficiency_correlated", "smearing_bins": 10,
                              "smearing_radius": 2}
    dec = build_dalitz(opts, np.random.default_rng(7))
    plain = build_dalitz(_declared("H1"))
    data = ref.sample(ref.parameters.values, np.random.default_rng(3))
    x = ref.parameters.values
    assert dec.nll(data)(x) == ref.nll(data)(x)
    assert plain.nll(data)(x) != ref.nll(data)(x)  # the smearing did change the maps


def test_declared_draws_equal_builder() -> None:
    """Parameter draws (``draw_kstar`` of zc4100, ``draw`` of the declaration) take the same
    random numbers in the same order."""
    ref = build_zc4100({"hypothesis": "baseline", "draw_kstar": True, "draw_kind": "gaussian"},
                       np.random.default_rng(11))
    dec = build_dalitz(_declared("H0") | {"draw": "gaussian"}, np.random.default_rng(11))
    assert dec.parameters.params == ref.parameters.params
    assert ref.parameters.values[0] != build_zc4100({"hypothesis": "baseline"}).parameters.values[0]


# --- one-line errors naming the field ------------------------------------------------------
def _small() -> dict:
    return {
        "parent": {"name": "B+", "mass": 5279.34},
        "daughters": [{"name": "K+", "mass": 493.677}, {"name": "pi-", "mass": 139.57},
                      {"name": "pi+", "mass": 139.57}],
        "isobars": [
            {"name": "kst892", "pair": ["K+", "pi-"], "lineshape": "rbw", "spin": 1,
             "mass": {"value": 895.55}, "width": {"value": 47.3}, "coefficient": [1.0, 0.0],
             "reference": True},
            {"name": "rho770", "pair": ["pi-", "pi+"], "lineshape": "rbw", "spin": 1,
             "mass": {"value": 775.26}, "width": {"value": 149.1},
             "coefficient": [0.8, 0.3]},
        ],
        "runs": {"all": {"efficiency": "flat", "yields": {"sig": [2000.0, 45.0]}}},
    }


def _error(opts: dict) -> str:
    with pytest.raises(ModelError) as exc:
        build_dalitz(opts)
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_small_declaration_builds() -> None:
    m = build_dalitz(_small())
    assert m.component_names == ("kst892", "rho770")
    assert [c.pair for c in m.components] == ["kpi", "etacpi"]
    assert m.parameters.names == ("m_kst892", "w_kst892", "re_kst892", "im_kst892",
                                  "m_rho770", "w_rho770", "re_rho770", "im_rho770",
                                  "n_sig_all")


def test_error_typo() -> None:
    o = _small()
    o["isobars"][1]["lineshap"] = o["isobars"][1].pop("lineshape")
    text = _error(o)
    assert "isobars[1]" in text and "allowed keys" in text, text
    o = _small()
    o["isobars"][1]["lineshape"] = "rbv"
    text = _error(o)
    assert "isobars[1].lineshape" in text and "'rbv'" in text, text


def test_error_impossible_pair() -> None:
    o = _small()
    o["isobars"][1]["pair"] = ["pi-", "K-"]
    text = _error(o)
    assert "isobars[1].pair" in text and "two of the daughters" in text, text
    o["isobars"][1]["pair"] = ["pi-", "pi-"]
    assert "isobars[1].pair" in _error(o)


def test_error_spin_the_lineshape_cannot_take() -> None:
    o = _small()
    o["isobars"][1] = {"name": "nr", "pair": ["pi-", "pi+"], "lineshape": "flat", "spin": 1}
    text = _error(o)
    assert "isobars[1].spin" in text and "flat" in text, text
    o["isobars"][1] = {"name": "s", "pair": ["K+", "pi-"], "lineshape": "lass", "spin": 2,
                       "mass": {"value": 1430.0}, "width": {"value": 270.0},
                       "a": {"value": 3.1}, "r": {"value": 7.0}}
    assert "isobars[1].spin" in _error(o)


def test_error_closed_phase_space() -> None:
    o = _small()
    o["daughters"][0]["mass"] = 5100.0  # 5100 + 2 × 139.57 > 5279.34
    text = _error(o)
    assert "parent.mass" in text and "closed" in text, text


def test_error_pole_outside_pair_range_and_missing_parameter() -> None:
    o = _small()
    o["isobars"][1]["mass"] = {"value": 200.0}  # below the π π threshold
    assert "isobars[1]" in _error(o)
    o = _small()
    del o["isobars"][1]["width"]
    text = _error(o)
    assert "isobars[1].width" in text, text
    o = _small()
    o["isobars"][1]["a"] = {"value": 1.0}
    assert "isobars[1].a" in _error(o)
    o = _small()
    o["isobars"][1]["reference"] = True
    assert "reference" in _error(o)


def test_bad_declaration_fails_before_any_task(tmp_path: Path, cli) -> None:
    """A study whose declaration names a pair of unknown daughters: ``toyengine run``
    prints one line naming the field, no traceback, and writes no store."""
    import yaml

    o = _small()
    o["isobars"][1]["pair"] = ["pi-", "K-"]
    study = {"name": "bad-dalitz", "kind": "pulls", "seed": 1, "toys": 2,
             "models": {"m": {"builder": "dalitz", "options": o}}, "generate": "m",
             "hypotheses": ["m"]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(study))
    store = tmp_path / "out.zarr"
    res = cli("run", path, "--store", store)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "isobars[1].pair" in lines[0], lines[0]
    assert not store.exists()
