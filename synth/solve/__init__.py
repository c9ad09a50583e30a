"""Solvers that build schedules: CP-SAT step synthesis (sat) and LP tree packing for bandwidth optimality (bwopt)."""
