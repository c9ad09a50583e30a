"""SCCL-style synthesis with OR-Tools CP-SAT: one instance (S, R, C), compositions, and Pareto searches."""
