"""The ``synthesize`` pipeline: topology -> verified candidates -> size-based plan, report and exports."""
