"""``python -m toyengine.cli.dalitz_check STUDY.yaml MODEL``: the checks of a Dalitz model
before its toys (fit fractions, normalisation, generated-vs-PDF χ²;
:func:`toyengine.models.dalitz.check_dalitz_model`, ``docs/models.md``)."""

from __future__ import annotations

import math
import sys

from ..core.dalitz.model import DalitzModel
from ..errors import ModelError
from ..models.dalitz import check_dalitz_model
from ..study.spec import build_model, load_spec

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Print the checks of :func:`check_dalitz_model` for model ``MODEL`` (first variant)
    of a study; exit code 0, or 1 with one line on stderr for a bad study or model."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m toyengine.cli.dalitz_check STUDY.yaml MODEL", file=sys.stderr)
        return 2
    try:
        spec = load_spec(args[0])
        if args[1] not in spec.models:
            print(f"error: {args[0]}: no model {args[1]!r} (models: {sorted(spec.models)})",
                  file=sys.stderr)
            return 1
        model = build_model(spec, spec.variants[0], args[1])
        if not isinstance(model, DalitzModel):
            print(f"error: model {args[1]!r} is not a Dalitz-plot model", file=sys.stderr)
            return 1
        rep = check_dalitz_model(model)
    except (ModelError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'component':<16}{'fit fraction':>14}")
    for k, v in rep["fit_fractions"].items():
        print(f"{k:<16}{v:>14.4f}")
    print(f"{'sum':<16}{rep['ff_sum']:>14.4f}")
    for k, v in rep["integral"].items():
        print(f"integral of the {k} PDF: {v:.8f}")
    k = rep["bins_used"]
    print(f"generated vs PDF: chi2 = {rep['chi2']:.1f} for {k} bins (expected {k - 1} ± "
          f"{math.sqrt(2 * (k - 1)):.1f}), {rep['n_generated']} events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
