"""The Topology model (a networkx graph of GPUs, switches, CPUs and NICs) and its versioned JSON form."""
