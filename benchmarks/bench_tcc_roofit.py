"""The T_cc+ pulls study through ``toyengine run`` against the same study in RooFit, side by side.

Usage::

    pip install -e ".[roofit]"        # ROOT from its wheel (optional; ~250 MB)
    python benchmarks/bench_tcc_roofit.py [--toys 200 60200] [--roofit-toys 100 600] [--rounds 3]
    python benchmarks/bench_tcc_roofit.py --check 50   # the two models fit the same toys alike

What it times: whole processes' wall time, pinned to one core (``--cpu``, default 0; every
process of the run — client, scheduler and the one worker — shares it). Each side runs the
study twice, with N1 and N2 toys (``--toys`` for toyengine, ``--roofit-toys`` for RooFit: the
counts differ so that both differences last about a minute or more: toyengine's start-up, 6 to
15 s on a shared machine, varies by seconds, and 5000 toys were too few to see past it; at
≈ 1 ms a toy, 20 000 toys still let a start-up one second longer move the figure by 5 %); the
**marginal cost per toy**
``(t(N2) - t(N1)) / (N2 - N1)`` removes start-up (imports, ROOT's interpreter, the Dask
cluster, numba's kernels, the store's creation). The sides alternate (toyengine N1, RooFit N1,
toyengine N2, RooFit N2) ``--rounds`` times, after one untimed run of each side (file
caches, numba's kernel cache), and the ratio is printed round by round.

- **toyengine:** ``toyengine run studies/tcc/pulls.yaml --workers 1 --toys N --quiet`` into a
  fresh store: generation, the fit (trust-region Newton on the analytic gradient and Hessian;
  the errors from the inverse Hessian at the minimum, as HESSE gives them), records and zarr
  chunk writes.
- **RooFit** (ROOT 6.40 from its wheel, ``EvalBackend("legacy")``: with ``"cpu"``, the default,
  each likelihood call inside ``fitTo`` took ≈ 0.5 s on this model, 27 calls for MIGRAD's seed
  alone, against ≈ 1 ms here): the model of the same study file, built below from the
  study's own options and parameters — a P-wave relativistic Breit–Wigner with
  a Blatt–Weisskopf factor (r = 3.5 GeV⁻¹, R → (D0 D0) π+; LHCb, Eur. Phys. J. C 78 (2018)
  1019, Eqs. 7–8) and Φ2(D*+ D0) × a positive 2nd-order Bernstein polynomial (LHCb, Nature
  Communications 13 (2022) 3351, Eq. 2), each ``RooFFTConvPdf``-convolved with the double
  Gaussian of Nature Communications 13 (2022) 3351 (Methods) on the study's 20 keV grid;
  extended ``RooAddPdf``; ``generate(Extended)`` and ``fitTo(Extended, Save)`` (MIGRAD +
  HESSE, Minuit2) per toy from the generation values, results kept in memory.

``--check N`` fits the same N toyengine-generated toys with both models and prints the
differences of the fitted δm_BW, Γ_BW and N_sig in units of toyengine's HESSE error: the
RooFit model is the study's model only if they are small (the two convolutions are not the
same numerics, so not zero).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
STUDY = ROOT_DIR / "studies" / "tcc" / "pulls.yaml"


def study_model() -> dict:
    """Everything the RooFit model needs, read from the study file through toyengine."""
    from toyengine.core.kinematics import MASSES_PDG2020 as M
    from toyengine.core.resolution import TCC_FRAC, TCC_SIGMA1_SIM, TCC_SIGMA_RATIO
    from toyengine.models.tcc import TCC_OFFSET, TccOptions
    from toyengine.study.spec import load_spec

    spec = load_spec(STUDY)
    declared = spec.models["nominal"]
    opts = TccOptions.parse(declared["options"])
    assert opts.signal == "bw" and opts.resolution == "double_gaussian"
    assert opts.background_order == 2 and opts.three_body_order is None and opts.L == 1
    s1 = opts.resolution_scale * TCC_SIGMA1_SIM
    return {"lo": opts.range[0], "hi": opts.range[1], "grid_step": opts.grid_step,
            "offset": TCC_OFFSET, "m_a": 2 * M["D0"], "m_b": M["pi+"], "radius": opts.radius,
            "m_dstar": M["D*+"], "m_d0": M["D0"], "sigma1": s1, "sigma2": TCC_SIGMA_RATIO * s1,
            "frac": TCC_FRAC, "params": dict(declared["parameters"]), "seed": spec.seed}


# ----------------------------------------------------------------------------- RooFit side

def build_roofit(m: dict):  # noqa: ANN201 - ROOT objects
    """The study's model in RooFit: the observable, the extended model, the floating
    parameters with their generation values, and every object kept alive."""
    import ROOT

    ROOT.RooMsgService.instance().setGlobalKillBelow(ROOT.RooFit.ERROR)
    p = m["params"]
    keep = []  # RooFit objects hold references only: keep every one alive

    def k(obj):  # noqa: ANN001, ANN202
        keep.append(obj)
        return obj

    x = k(ROOT.RooRealVar("x", "δm", m["lo"], m["hi"], "MeV"))
    nbins = round((m["hi"] - m["lo"]) / m["grid_step"])
    x.setBins(nbins, "cache")
    dm = k(ROOT.RooRealVar("delta_m", "δm_BW", p["delta_m"], -3.0, 3.0))
    gam = k(ROOT.RooRealVar("gamma", "Γ_BW", p["gamma"], 0.0, 5.0))
    n_sig = k(ROOT.RooRealVar("n_sig", "N_sig", p["n_sig"], -1000.0, 1e6))
    n_bkg = k(ROOT.RooRealVar("n_bkg", "N_bkg", p["n_bkg"], 0.0, 1e7))
    phi1 = k(ROOT.RooRealVar("phi1", "φ1", p["bkg_phi1"], 0.0, math.pi / 2))
    phi2 = k(ROOT.RooRealVar("phi2", "φ2", p["bkg_phi2"], 0.0, math.pi / 2))

    # P-wave relativistic BW, Γ(m) = Γ0 (q/q0)^3 (m0/m) D1(z0)/D1(z), z = q r (GeV units)
    qs = ("sqrt(max(({m}*{m}-{s}*{s})*({m}*{m}-{d}*{d}),0.0))/(2.0*{m})")
    s, d = m["m_a"] + m["m_b"], m["m_a"] - m["m_b"]
    # positional names (@0 = x, @1, @2 = the parameters): TFormula refuses ``max(x, ..)``
    mm = f"(@0+{m['offset']!r})"
    m0 = f"(@1+{m['offset']!r})"
    q = qs.format(m=mm, s=repr(s), d=repr(d))
    q0 = qs.format(m=m0, s=repr(s), d=repr(d))
    r = m["radius"] / 1000.0
    width = (f"(@2*pow(({q})/({q0}),3)*({m0}/{mm})*(1.0+pow({r!r}*({q0}),2))"
             f"/(1.0+pow({r!r}*({q}),2)))")
    bw = f"{mm}*{m0}*{width}/(pow({m0}*{m0}-{mm}*{mm},2)+pow({m0}*{width},2))"
    sig_phys = k(ROOT.RooGenericPdf("bw", "P-wave BW", bw, ROOT.RooArgList(x, dm, gam)))

    # Φ2(D*+ D0) × positive Bernstein polynomial (sphere coefficients), clamped outside range
    ps = qs.format(m=mm, s=repr(m["m_dstar"] + m["m_d0"]), d=repr(m["m_dstar"] - m["m_d0"]))
    lo, hi = f"({m['lo']!r})", f"({m['hi']!r})"
    t = f"((min(max(@0,{lo}),{hi})-{lo})/({hi}-{lo}))"
    c0, c1 = "pow(cos(@1),2)", "pow(sin(@1),2)*pow(cos(@2),2)"
    c2 = "pow(sin(@1),2)*pow(sin(@2),2)"
    poly = f"({c0}*pow(1.0-{t},2)+{c1}*2.0*{t}*(1.0-{t})+{c2}*pow({t},2))"
    bkg_phys = k(ROOT.RooGenericPdf("bkg_ps", "Φ2 × P2", f"(({ps})/{mm})*{poly}",
                                    ROOT.RooArgList(x, phi1, phi2)))

    zero = k(ROOT.RooRealVar("zero", "", 0.0))
    s1 = k(ROOT.RooRealVar("s1", "", m["sigma1"]))
    s2 = k(ROOT.RooRealVar("s2", "", m["sigma2"]))
    f1 = k(ROOT.RooRealVar("f1", "", m["frac"]))
    g1 = k(ROOT.RooGaussian("g1", "", x, zero, s1))
    g2 = k(ROOT.RooGaussian("g2", "", x, zero, s2))
    res = k(ROOT.RooAddPdf("res", "double Gaussian", ROOT.RooArgList(g1, g2),
                           ROOT.RooArgList(f1)))
    zero.setVal(-_fft_offset(ROOT, x, res, 0.5 * (m["lo"] + m["hi"])))
    sig = k(ROOT.RooFFTConvPdf("sig", "BW ⊗ R", x, sig_phys, res))
    bkg = k(ROOT.RooFFTConvPdf("bkg", "Φ2 P2 ⊗ R", x, bkg_phys, res))
    model = k(ROOT.RooAddPdf("model", "", ROOT.RooArgList(sig, bkg),
                             ROOT.RooArgList(n_sig, n_bkg)))
    floating = [dm, gam, n_sig, n_bkg, phi1, phi2]
    truth = [v.getVal() for v in floating]
    return {"x": x, "model": model, "floating": floating, "truth": truth, "keep": keep}


def _fft_offset(ROOT, x, res, centre: float) -> float:  # noqa: ANN001, N803
    """Where ``RooFFTConvPdf`` puts a peak at ``centre`` convolved with ``res``, minus ``centre``.

    On a range not centred on zero, RooFit samples the resolution with its zero rounded to a
    whole number of bins of the buffered grid (``RooFFTConvPdf::scanPdf`` truncates the bin
    shift), which moves every convolved shape by a fraction of a bin up to a bin or two: on the
    study's 20 keV grid by −30 keV, half of σ(δm_BW). Measured with a narrow Gaussian (its
    mean is known; the resolution's is zero) and taken off the resolution's mean, so that
    RooFit fits the study's model; ``--check`` shows the two fits agree with it.
    """
    mu = ROOT.RooRealVar("mu_probe", "", centre)
    w = ROOT.RooRealVar("w_probe", "", 0.05)
    peak = ROOT.RooGaussian("peak_probe", "", x, mu, w)
    conv = ROOT.RooFFTConvPdf("conv_probe", "", x, peak, res)
    ns = ROOT.RooArgSet(x)
    lo, hi = x.getMin(), x.getMax()
    n = 20_000
    h = (hi - lo) / n
    vals, xs = [], []
    saved = x.getVal()
    for i in range(n):
        xs.append(lo + (i + 0.5) * h)
        x.setVal(xs[-1])
        vals.append(conv.getVal(ns))
    x.setVal(saved)
    return sum(a * b for a, b in zip(xs, vals, strict=True)) / sum(vals) - centre


def _reset(obj: dict) -> None:
    """The floating parameters back at their generation values."""
    for v, t in zip(obj["floating"], obj["truth"], strict=True):
        v.setVal(t)


def _fit(obj: dict, data) -> tuple[int, list[float], list[float]]:  # noqa: ANN001
    import ROOT

    _reset(obj)
    r = obj["model"].fitTo(data, ROOT.RooFit.Extended(True), ROOT.RooFit.Save(True),
                           ROOT.RooFit.PrintLevel(-1), ROOT.RooFit.EvalBackend("legacy"))
    return (r.status(), [v.getVal() for v in obj["floating"]],
            [v.getError() for v in obj["floating"]])


def roofit_toys(m: dict, n: int) -> None:
    """Generate and fit ``n`` toys of the study with RooFit (the timed child process)."""
    import ROOT

    obj = build_roofit(m)
    ROOT.RooRandom.randomGenerator().SetSeed(m["seed"])
    x, model = obj["x"], obj["model"]
    bad = 0
    for _ in range(n):
        _reset(obj)  # the last fit moved them
        data = model.generate(ROOT.RooArgSet(x), ROOT.RooFit.Extended(True))
        status, _, _ = _fit(obj, data)
        bad += status != 0
        del data
    print(json.dumps({"toys": n, "failed": bad}))


def roofit_fit_arrays(m: dict, samples: list[list[float]]) -> list[dict]:
    """Fit given samples (the ``--check`` comparison)."""
    import ROOT

    obj = build_roofit(m)
    x = obj["x"]
    out = []
    for s in samples:
        data = ROOT.RooDataSet("d", "", ROOT.RooArgSet(x))
        for v in s:
            x.setVal(v)
            data.add(ROOT.RooArgSet(x))
        status, vals, errs = _fit(obj, data)
        out.append({"status": status, "values": vals, "errors": errs})
    return out


# -------------------------------------------------------------------------- the comparison

def _timed(cmd: list[str], cpu: int | None) -> tuple[float, str]:
    """Wall seconds of ``cmd`` (pinned to ``cpu``) and its standard output."""
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, proc.stdout


def _toyengine_run(n: int, cpu: int | None, work: Path) -> float:
    store = work / f"tcc_{n}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    exe = shutil.which("toyengine") or str(Path(sys.executable).with_name("toyengine"))
    wall, _ = _timed([exe, "run", str(STUDY), "--store", str(store), "--workers", "1",
                      "--toys", str(n), "--quiet"], cpu)
    shutil.rmtree(store, ignore_errors=True)
    return wall


def _roofit_run(n: int, cpu: int | None, work: Path, python: str) -> tuple[float, int]:
    """Wall seconds of ``n`` RooFit toys and the number of their fits with status != 0."""
    spec = work / "model.json"
    wall, out = _timed([python, __file__, "--roofit-child", str(spec), str(n)], cpu)
    return wall, json.loads(out.strip().splitlines()[-1])["failed"]


def compare(toys: tuple[int, int], rf_toys: tuple[int, int], rounds: int, cpu: int | None,
            python: str) -> None:
    n1, n2 = toys
    r1, r2 = rf_toys
    env_note = os.environ.get("OMP_NUM_THREADS")
    with tempfile.TemporaryDirectory(prefix="bench_roofit_") as tmp:
        work = Path(tmp)
        (work / "model.json").write_text(json.dumps(study_model()))
        print(f"T_cc+ pulls study ({STUDY.relative_to(ROOT_DIR)}), marginal cost per toy "
              f"(toyengine between {n1} and {n2} toys, RooFit between {r1} and {r2}), whole "
              f"processes on core {cpu} (OMP_NUM_THREADS={env_note}):")
        _toyengine_run(n1, cpu, work)  # untimed: numba's cache, the OS's file cache
        _roofit_run(r1, cpu, work, python)
        ratios = []
        for k in range(rounds):
            te1 = _toyengine_run(n1, cpu, work)
            rf1, _ = _roofit_run(r1, cpu, work, python)
            te2 = _toyengine_run(n2, cpu, work)
            rf2, failed = _roofit_run(r2, cpu, work, python)
            te = (te2 - te1) / (n2 - n1)
            rf = (rf2 - rf1) / (r2 - r1)
            ratios.append(rf / te)
            print(f"  round {k + 1}: toyengine {1e3 * te:.2f} ms/toy ({te1:.1f} s, {te2:.1f} s); "
                  f"RooFit {1e3 * rf:.1f} ms/toy ({rf1:.1f} s, {rf2:.1f} s; {failed} of {r2} "
                  "fits with status != 0); "
                  f"RooFit / toyengine = {rf / te:.0f}x")
        print(f"ratio per round: {', '.join(f'{r:.0f}x' for r in ratios)}; "
              f"median {statistics.median(ratios):.0f}x")


def check(n: int, python: str) -> None:
    """Fit the same toyengine-generated toys with both models."""
    import numpy as np

    from toyengine.core.fit import fit
    from toyengine.study.spec import build_model, load_spec

    spec = load_spec(STUDY)
    model = build_model(spec, spec.variants[0], "nominal")
    truth = model.parameters
    samples, ours = [], []
    for t in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(t,)))
        x = model.sample(truth.values, rng)
        res = fit(model.nll(x), truth)
        samples.append([float(v) for v in x])
        ours.append(res)
    with tempfile.TemporaryDirectory(prefix="bench_roofit_") as tmp:
        spec_file = Path(tmp) / "model.json"
        spec_file.write_text(json.dumps({**study_model(), "samples": samples}))
        proc = subprocess.run([python, __file__, "--roofit-fit", str(spec_file)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(proc.stderr[-2000:])
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    names = ["delta_m", "gamma", "n_sig"]
    print(f"{n} toys of the study, fitted by toyengine and by RooFit; difference of the fitted "
          "value in units of toyengine's HESSE error, (RooFit - toyengine) / σ:")
    for i, name in enumerate(names):
        j = ours[0].names.index(name)
        d = [(th["values"][i] - o.values[j]) / o.errors[j]
             for o, th in zip(ours, theirs, strict=True)
             if th["status"] == 0 and o.valid]
        print(f"  {name:8s} mean {statistics.mean(d):+.3f}, rms "
              f"{math.sqrt(statistics.mean([v * v for v in d])):.3f}, max |.| "
              f"{max(abs(v) for v in d):.3f}  ({len(d)} toys)")
        e = [th["errors"][i] / o.errors[j] for o, th in zip(ours, theirs, strict=True)
             if th["status"] == 0 and o.valid]
        print(f"  {'':8s} error ratio RooFit / toyengine: median {statistics.median(e):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toys", type=int, nargs=2, default=(200, 60200), metavar=("N1", "N2"),
                    help="toyengine's two toy counts")
    ap.add_argument("--roofit-toys", type=int, nargs=2, default=(100, 600),
                    metavar=("N1", "N2"), help="RooFit's two toy counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="core to pin every process to (-1: none)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with ROOT (default: this one)")
    ap.add_argument("--check", type=int, metavar="N", help="fit N toys with both models")
    ap.add_argument("--roofit-child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--roofit-fit", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.roofit_child:
        roofit_toys(json.loads(Path(a.roofit_child[0]).read_text()), int(a.roofit_child[1]))
    elif a.roofit_fit:
        m = json.loads(Path(a.roofit_fit).read_text())
        print(json.dumps(roofit_fit_arrays(m, m.pop("samples"))))
    elif a.check:
        check(a.check, a.python)
    else:
        compare(tuple(a.toys), tuple(a.roofit_toys), a.rounds,
                None if a.cpu < 0 else a.cpu, a.python)


if __name__ == "__main__":
    main()
