"""Gaussian peak on an exponential background in [lo, hi]: a toyengine model plug-in.

Study file: ``builder: expgauss:build`` (this directory importable on the client and workers;
the module allowed: ``toyengine run STUDY --plugin expgauss``).
"""
import numpy as np
from scipy.special import ndtr, ndtri

from toyengine.core.params import Parameter, ParameterSet
from toyengine.models import model_builder
from toyengine.models.protocol import ToyModelBase


class ExpGauss(ToyModelBase):  # ToyModelBase: the defaults of the optional members
    def __init__(self, lo: float, hi: float, parameters: ParameterSet):
        self.lo, self.hi, self.parameters = lo, hi, parameters

    def density(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """sum_c N_c f_c(x), each f_c normalised on [lo, hi]."""
        n_sig, mu, sigma, n_bkg, slope = v
        lo, hi = self.lo, self.hi
        g_norm = sigma * np.sqrt(2 * np.pi) * (ndtr((hi - mu) / sigma) - ndtr((lo - mu) / sigma))
        e_norm = np.expm1(slope * (hi - lo)) / slope if slope else hi - lo
        return (n_sig * np.exp(-0.5 * ((x - mu) / sigma) ** 2) / g_norm
                + n_bkg * np.exp(slope * (x - lo)) / e_norm)

    def sample(self, values: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        n_sig, mu, sigma, n_bkg, slope = self.parameters.values if values is None else values
        lo, hi = self.lo, self.hi
        a, b = ndtr((lo - mu) / sigma), ndtr((hi - mu) / sigma)  # truncated Gaussian
        sig = mu + sigma * ndtri(a + (b - a) * rng.random(rng.poisson(n_sig)))
        u = rng.random(rng.poisson(n_bkg))  # truncated exponential, inverse CDF
        bkg = lo + (np.log1p(u * np.expm1(slope * (hi - lo))) / slope if slope
                    else u * (hi - lo))
        return np.concatenate([sig, bkg])

    def nll(self, data: np.ndarray):
        x = data[(data >= self.lo) & (data <= self.hi)]

        def nll(v: np.ndarray) -> float:  # extended -ln L, constants dropped
            return float(v[0] + v[3] - np.sum(np.log(np.maximum(self.density(x, v), 1e-300))))

        nll.errordef = 0.5
        return nll


@model_builder  # marks the function a study file may name
def build(options: dict, rng: np.random.Generator | None = None) -> ExpGauss:
    lo, hi = options.get("range", [5180.0, 5380.0])
    return ExpGauss(lo, hi, ParameterSet((
        Parameter("n_sig", 400.0, (-200.0, 5000.0)),
        Parameter("mu", 5280.0, (5250.0, 5310.0)),
        Parameter("sigma", 12.0, (2.0, 40.0)),
        Parameter("n_bkg", 1500.0, (0.0, 20000.0)),
        Parameter("slope", -0.005, (-0.1, 0.1)))))
