"""The one-process Communicator (one array per rank): checks, send/recv, fusion, compression."""
