"""The process-per-rank MPICommunicator: start-up agreement, MPI transport, deadlines, wires, IPC."""
