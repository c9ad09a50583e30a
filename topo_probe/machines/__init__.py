"""Ready-made machines: published presets, synthetic generators and multi-host clusters."""
