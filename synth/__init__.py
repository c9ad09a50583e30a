"""synth: collective definitions, schedule IR, verifier, cost model, bounds, baselines, solver."""
