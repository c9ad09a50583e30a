"""The ``topo-probe`` command and the plain-text views of a topology it prints."""
