"""Write the stand-in inputs of the Zc(4100) studies into this directory.

- ``eff_run1.npz``, ``eff_run2.npz``: efficiency maps (25 × 25 SDP bins);
- ``bkg_comb.npz``, ``bkg_nr.npz``: combinatorial and NR background maps (12 × 12 SDP bins,
  Run 1 + Run 2 merged shapes, scaled per run by the yields);
- ``reference_data.npz``: a pseudo-data set generated from the nominal model (Zc 1−,
  4096/152 MeV, illustrative coefficients) with the maps above and seed ``SEED``.

The maps are deterministic functions (``toyengine.models.zc4100_maps``); only the reference
data use random numbers. Run from the repository root::

    python studies/zc4100/make_inputs.py

Re-running reproduces the files bit for bit (same numpy version).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from toyengine import __version__
from toyengine.models.zc4100 import build_zc4100
from toyengine.models.zc4100_maps import background_maps, efficiency_maps

#: seed of the reference pseudo-data (the arXiv number of the Z_c(4100) paper, 1809.07416)
SEED = 180907416

HERE = Path(__file__).resolve().parent


def main() -> int:
    for run, h in efficiency_maps().items():
        h.save_npz(HERE / f"eff_{run}.npz")
    for name, h in background_maps().items():
        h.save_npz(HERE / f"bkg_{name}.npz")
    model = build_zc4100({"hypothesis": "nominal", "map_dir": str(HERE)})
    rng = np.random.default_rng(SEED)
    data = model.sample(model.parameters.values, rng)
    values = dict(zip(model.parameters.names, model.parameters.values.tolist(), strict=True))
    data.save_npz(str(HERE / "reference_data.npz"), seed=SEED, model="zc4100",
                  options="{'hypothesis': 'nominal'}", toyengine_version=__version__,
                  numpy_version=np.__version__, generation_values=values)
    for run, rs in data.runs.items():
        counts = np.bincount(rs.label, minlength=3)
        print(f"{run}: {len(rs)} events (signal {counts[0]}, comb {counts[1]}, nr {counts[2]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
