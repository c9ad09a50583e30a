"""Lowering a schedule into a program of per-step copy / reduce / scale ops on rank buffers."""
