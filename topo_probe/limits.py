"""The limits every loader applies to hostile input: sizes, counts and physical ranges, in one place.

* **size**: at most :data:`MAX_INPUT_BYTES` read from a file, also after gzip decompression (a gzip bomb stops there:
  :mod:`topo_probe.capped_read`);
* **JSON**: at most :data:`MAX_JSON_DEPTH` levels, :data:`MAX_JSON_CONTAINERS` objects and arrays and
  :data:`MAX_JSON_VALUES` values (:mod:`topo_probe.json_guard`; a schedule has its own ``MAX_SCHEDULE_*``);
* **counts** before enumerating: :data:`MAX_GPUS` GPUs or ranks, :data:`MAX_CHUNKS_PER_RANK`, :data:`MAX_CHUNK_CELLS`
  (chunks x ranks, what the verifier's state holds), :data:`MAX_LINKS_PER_EDGE` (:data:`MAX_NETWORK_LINKS_PER_EDGE`),
  :data:`MAX_MATRIX_COLUMNS`, :data:`MAX_EDGES`, :data:`MAX_NODES`;
* **physics**: bandwidths finite in [:data:`MIN_BANDWIDTH_GBPS`, :data:`MAX_BANDWIDTH_GBPS`] GB/s per direction (a
  network edge's per port: :func:`topo_probe.topology.checks.edge_limits`), latencies finite in
  [0, :data:`MAX_LATENCY_US`] µs, sizes in [0, :data:`MAX_BYTES`] bytes, times finite in (0, :data:`MAX_TIME_US`] µs.

>>> MAX_NETWORK_LINKS_PER_EDGE == MAX_HOSTS * MAX_NICS_PER_HOST
True
"""

from __future__ import annotations

__all__ = ["MAX_INPUT_BYTES", "MAX_JSON_DEPTH", "MAX_JSON_CONTAINERS", "MAX_JSON_VALUES", "MAX_GPUS",
           "MAX_CHUNKS_PER_RANK", "MAX_CHUNK_CELLS", "MAX_SCHEDULE_BYTES", "MAX_SCHEDULE_CONTAINERS",
           "MAX_SCHEDULE_VALUES", "MAX_SCHEDULE_GZIP_RATIO", "MAX_ROUNDS", "MAX_LINKS_PER_EDGE", "MAX_HOSTS",
           "MAX_NICS_PER_HOST", "MAX_OVERSUBSCRIPTION", "MAX_NETWORK_LINKS_PER_EDGE", "MAX_MATRIX_COLUMNS", "MAX_EDGES",
           "MAX_NODES", "MIN_BANDWIDTH_GBPS", "MAX_BANDWIDTH_GBPS", "MAX_LATENCY_US", "MAX_BYTES", "MAX_TIME_US"]

#: Largest file (and largest gzip output) a loader reads, bytes (the largest schedule under ``results/``: 2.3 MB).
MAX_INPUT_BYTES = 32 * 2**20
#: Deepest JSON nesting accepted (our documents use at most 5 levels).
MAX_JSON_DEPTH = 32
#: Most JSON objects + arrays in one document (``{`` and ``[`` counted before parsing).
MAX_JSON_CONTAINERS = 2**18
#: Most JSON values in one document (commas counted before parsing).
MAX_JSON_VALUES = 2**21
#: Most GPUs in a topology, ranks in a schedule.
MAX_GPUS = 1024
#: Most chunks per rank of a schedule.
MAX_CHUNKS_PER_RANK = 4096
#: Most chunks x ranks of a schedule (the verifier keeps a dict entry per pair it touches; a 256-rank AllToAll: 256**3).
MAX_CHUNK_CELLS = 2**24
#: Schedules are the one document that grows with the cluster (a 1,024-rank AllReduce is about 2.1 million
#: transfers: ~100 MB of JSON, ~10 million values): own limits of bytes read (also after gunzip), containers, values.
MAX_SCHEDULE_BYTES = 256 * 2**20
MAX_SCHEDULE_CONTAINERS = 2**23
MAX_SCHEDULE_VALUES = 2**24
#: A ``.json.gz`` schedule decompresses to at most this many times its size (real ones: ~16x)
#: beyond :data:`MAX_INPUT_BYTES`, so a small gzip bomb costs no more than a general loader's.
MAX_SCHEDULE_GZIP_RATIO = 32
#: Most fabric rounds one schedule step may declare.
MAX_ROUNDS = 10**6
#: Most physical links bonded in one edge (NVLink: 18 per GPU today); a ``network`` edge has its own limit.
MAX_LINKS_PER_EDGE = 64
#: Most columns (GPUs + NICs) of one host's ``nvidia-smi topo -m`` matrix.
MAX_MATRIX_COLUMNS = 128
#: Most hosts in a host count (``--nodes``, ``--hosts-per-leaf``), NICs of one host (a host a cluster joins, and
#: ``with_nics``/``--nics-per-node``: as many as a host's matrix has columns; GB200 NVL72: 72) and spine
#: oversubscription (R:1) of a leaf-spine cluster.
MAX_HOSTS, MAX_NICS_PER_HOST, MAX_OVERSUBSCRIPTION = 4096, MAX_MATRIX_COLUMNS, 1024
#: Most ports of one ``network`` edge: a cluster's leaf uplink has hosts per leaf x NICs per host at most (R >= 1).
MAX_NETWORK_LINKS_PER_EDGE = MAX_HOSTS * MAX_NICS_PER_HOST
#: Most directed edges of a topology.
MAX_EDGES = 2**15
#: Most nodes (GPUs, switches, CPUs, NICs) of a topology.
MAX_NODES = 2**14
#: Bandwidth range of one edge, GB/s per direction (1 MB/s .. 100 TB/s).
MIN_BANDWIDTH_GBPS = 1e-3
MAX_BANDWIDTH_GBPS = 1e5
#: Largest one-way latency of an edge, µs (one second).
MAX_LATENCY_US = 1e6
#: Largest message size, bytes (1 PiB).
MAX_BYTES = 2**50
#: Longest time of one measured operation, µs (about 17 minutes).
MAX_TIME_US = 1e9
