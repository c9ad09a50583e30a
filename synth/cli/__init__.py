"""The synth command-line entry points: ``synthesize`` and ``simulate``."""
