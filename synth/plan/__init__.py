"""Size-based plans (which schedule runs for which message size) and how a call picks its schedule."""
