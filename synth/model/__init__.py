"""Performance models: the alpha-beta cost model of schedules and lower bounds on any schedule's time."""
