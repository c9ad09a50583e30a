"""Fit the execution-time constants of the NCCL model (synth/model/nccl/fitted_params.json) on real
logs together (tests/fixtures/real_logs, the cases of benchmarks/nccl_log_cases.py), never on a log
of a held-out machine class (``HELD_OUT_CLASSES``) nor on one no machine describes.

    python benchmarks/fit_nccl_model.py                # fit on the whole in-sample split, print the change
    python benchmarks/fit_nccl_model.py --write        # ... and commit it (fitted_params.json, results/model_validation/fit.txt)
    python benchmarks/fit_nccl_model.py --first-12     # fit on the first validation set's 12 tables only

Minimises, over every row (size > 0) of every table of every log, the soft-L1 loss of
``log(predicted time / measured time)`` (scipy ``least_squares``; the soft-L1 loss keeps one odd
row from dragging a constant).  One parameter set for all logs: each constant is keyed by GPU
architecture, link kind or network transport, never by log.  scipy is a dependency of
scikit-learn (the ``mpi`` extra); the model itself needs only the committed JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_cost_model as validation  # noqa: E402
from synth.model.nccl.params import DEFAULT_PARAMS, FITTED, TABLES, ModelParams, params_to_dict  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from topo_probe.errors import InvalidArgument  # noqa: E402
from shown_paths import script_command  # noqa: E402

#: (constant, lower bound, upper bound): ``(scalar,)`` or ``(table, key...)`` of ModelParams.
#: ``lat_scale/*/Simple`` is not fitted: Simple's latency is NCCL's own table (tuning.cc baseLat /
#: hwLat, NVIDIA/nccl b6475625, v2.28), since the multi-host logs cannot tell its per-hop cost from the
#: network's extra per hop (``net_lat/ib/Simple``): fitted without the one-host H100 logs it fell to 0.32.
#: ``lat_scale/sm70/Simple`` neither: the V100 log (NCCL 2.4) takes the ring table of its era (2.5's 5.7 µs
#: NVLink step, synth/model/nccl/versions.py), on which it fitted 1.046 (1.648 on 2.28's 3.4 µs step).
#: No A100 LL128 constant (``proto_eff/sm80/LL128``, ``lat_scale/sm80/LL128``): a ring's LL128 takes the generation's
#: share of NCCL's per-channel ring LL128 figure (channel_caps.ll128_generation_share, tuning.cc v2.28.9-1 lines
#: 175-180), its latency the ``*`` scale (NCCL's latency table has no GPU generation).
FIT_SPEC = [
    (("host_us",), 2.0, 10.0),
    (("host_us_per_channel",), 0.0, 0.5),
    (("proto_eff", "*", "LL"), 0.3, 1.2),
    (("proto_eff", "*", "LL128"), 0.3, 128.0 / 120.0),     # payload never above the line rate
    (("tree_eff", "*"), 0.5, 1.2),
    (("tree_ll128_channel_eff",), 0.2, 1.5),
    (("nvls_efficiency",), 0.5, 1.2),
    (("nvls_chunk_us",), 0.0, 2.0),
    (("link_eff", "sm70", "nvlink"), 0.5, 1.0),
    (("link_eff", "sm80", "nvlink"), 0.5, 1.0),
    (("link_eff", "sm90", "nvlink"), 0.5, 1.0),
    (("link_eff", "*", "xgmi"), 0.4, 1.0),
    (("lat_scale", "*", "LL128"), 0.3, 5.0),
    (("lat_scale", "*", "NVLS"), 0.3, 8.0),
    (("lat_scale", "sm80", "LL"), 0.3, 8.0),
    (("lat_scale", "sm80", "Simple"), 0.3, 8.0),
    (("lat_scale", "gfx942", "LL"), 0.3, 5.0),
    (("lat_scale", "gfx942", "Simple"), 0.3, 8.0),
    (("net_eff", "*"), 0.5, 1.0),
    (("net_lat", "tcpxo", "LL"), 0.0, 300.0),
    (("net_lat", "tcpxo", "Simple"), 0.0, 600.0),
    (("net_lat", "ib", "LL"), 0.0, 300.0),
    (("net_lat", "ib", "Simple"), 0.0, 600.0),
    (("net_chunk", "ib"), 0.0, 200.0),
    (("net_chunk", "tcpxo"), 0.0, 200.0),
    (("plugin_hop_share",), 0.0, 2.0),
    (("p2p_link_share",), 0.3, 1.25),
    (("p2p_net_channel_gbs",), 2.0, 50.0),
    (("msccl_allpairs_latency_us",), 2.0, 40.0),
    (("msccl_onestep_latency_us",), 2.0, 60.0),
    (("coop_launch_us",), 0.0, 100.0),
    (("ring_copy_gbs",), 10.0, 2000.0),
    (("p2p_cta_gbs",), 5.0, 200.0),
]
#: start of a constant the committed set lacks, by table
START = {"link_eff": 0.8, "lat_scale": 1.0, "net_eff": 0.85, "net_lat": 20.0, "proto_eff": 1.0,
         "net_chunk": 5.0, "tree_eff": 1.0}


#: what --write records beside the constants: the command and every constant's change
FIT_REPORT = ROOT / "results" / "model_validation" / "fit.txt"


def fit_cases(cases=None) -> list:
    """The cases a fit sees: ``cases`` (default: the in-sample split, what the committed constants are
    fitted on).

    Raises
    ------
    InvalidArgument
        One of them is of a held-out machine class or has no machine (``skip_reason``).
    """
    chosen = list(validation.IN_SAMPLE if cases is None else cases)
    barred = sorted({c.file for c in chosen if validation.held_out(c) or c.skip_reason})
    if barred:
        raise InvalidArgument(f"a fit never sees held-out or unpredicted logs: {', '.join(barred)}")
    return chosen


def residuals(values, keys, cases, base=DEFAULT_PARAMS) -> np.ndarray:
    """log(predicted / measured time) of every row of every case under the given constants."""
    params = base.with_vector(keys, values)
    out = []
    for case in cases:
        out += [np.log(x["pred_us"] / x["real_us"]) for x in validation.evaluate(case, params)["rows"]]
    return np.asarray(out)


def starting_point(base):
    """Keys, bounds and start of every constant of :data:`FIT_SPEC`: ``base``'s value, else
    :data:`START`, inside the bounds."""
    keys = [k for k, _, _ in FIT_SPEC]
    lo = np.array([low for _, low, _ in FIT_SPEC])
    hi = np.array([high for _, _, high in FIT_SPEC])
    x0 = [base.value(k) for k in keys]
    return keys, lo, hi, np.clip([START[k[0]] if v is None else v for k, v in zip(keys, x0)], lo + 1e-9, hi - 1e-9)


def _solve(keys, lo, hi, x0, cases, base, max_nfev):
    from scipy.optimize import least_squares
    res = least_squares(residuals, x0, bounds=(lo, hi), args=(keys, cases, base), loss="soft_l1", f_scale=0.1,
                        diff_step=1e-3, max_nfev=max_nfev)
    rounded = [float(f"{v:.4g}") for v in res.x]
    return base.with_vector(keys, rounded), res.cost, res.fun.size


def without_retired(base: ModelParams) -> ModelParams:
    """``base`` less the table entries that neither :data:`FIT_SPEC` names nor the hand-set defaults hold: a
    constant the model no longer fits (``proto_eff/sm80/LL128`` once the generation's LL128 share came from
    NCCL's table) must not stay in the committed file and stack on what replaced it."""
    named, hand = {k for k, _, _ in FIT_SPEC}, ModelParams()
    def kept(table):
        return {k: v for k, v in getattr(base, table).items()
                if (table, *(k if isinstance(k, tuple) else (k,))) in named or k in getattr(hand, table)}
    return replace(base, **{t: kept(t) for t in TABLES})


def fit(cases=None, max_nfev: int = 4000):
    """The fitted ModelParams and the loss (soft-L1 cost, rows) over all ``cases`` together,
    starting from the committed constants (less any retired one, :func:`without_retired`)."""
    base = without_retired(DEFAULT_PARAMS)
    keys, lo, hi, x0 = starting_point(base)
    return _solve(keys, lo, hi, x0, fit_cases(cases), base, max_nfev)


def fit_from_prior(cases, max_nfev: int = 4000):
    """``(params, fitted keys)``: the constants fitted on ``cases`` from the model's hand-set
    defaults (``ModelParams()``, :data:`START` where they have none), never from the committed
    fit, and only those that move some row of ``cases``; the others keep values no log chose
    (what ``holdout_nccl_model.py`` needs: scipy's bounded solver would otherwise drift even
    constants that no residual depends on)."""
    cases = fit_cases(cases)
    keys, lo, hi, x0 = starting_point(ModelParams())
    base = ModelParams().with_vector(keys, x0)
    r0 = residuals(x0, keys, cases, base)
    moves = []
    for i in range(len(keys)):      # a tenth of the way towards the farther bound
        x = x0.copy()
        x[i] += 0.1 * ((hi[i] - x0[i]) if hi[i] - x0[i] > x0[i] - lo[i] else (lo[i] - x0[i]))
        moves.append(bool(np.any(residuals(x, keys, cases, base) != r0)))
    fitted = [k for k, m in zip(keys, moves) if m]
    params, _, _ = _solve(fitted, lo[moves], hi[moves], x0[moves], cases, base, max_nfev)
    return params, fitted


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write the fit to {FITTED.relative_to(ROOT)}")
    p.add_argument("--in-sample", action="store_true", help="fit on every in-sample log (the default; kept for "
                   "the commands results/ names)")
    p.add_argument("--first-12", action="store_true", help="fit on the first validation set's 12 tables only")
    args = p.parse_args(argv)
    cases = validation.CASES if args.first_12 else validation.IN_SAMPLE
    params, cost, rows = fit(cases)
    lines = [f"soft-L1 cost {cost:.4f} over {rows} rows of {len(cases)} log tables"]
    for key, _, _ in FIT_SPEC:
        new, old = params.value(key), DEFAULT_PARAMS.value(key)
        change = f"{new / old - 1:+8.1%}" if old else "     new"
        lines.append(f"  {'/'.join(key):32s} {new:10.4g}  committed {old if old is not None else '-':>10}  {change}")
    print("\n".join(lines))
    if args.write:
        atomic_write_text(FITTED, json.dumps(params_to_dict(params), indent=1, sort_keys=True) + "\n")
        command = script_command(__file__, sys.argv[1:] if argv is None else argv)
        atomic_write_text(FIT_REPORT, "\n".join([f"Command: `{command}`", *lines,
                                                  f"wrote {FITTED.relative_to(ROOT)}"]) + "\n")
        print(f"wrote {FITTED} and {FIT_REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
