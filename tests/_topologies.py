"""Hand-built topologies shared by tests (not a test module).

Built from the published DGX-1 link matrix in tests/fixtures/REFERENCE.md, independently of
``topo_probe.machines.presets``, so tests of the solver, verifier and fabric do not lean on the preset code.
"""

from topo_probe.machines.generators import parity_mesh
from topo_probe.topology.model import Topology

DGX1_LINKS = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0],
              [1, 2, 2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2],
              [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def dgx1_hand(name: str = "dgx1-hand") -> Topology:
    """8 GPUs joined by NVLink2 bundles (25 GB/s per link per direction) as in DGX1_LINKS."""
    t = Topology(name)
    for i in range(8):
        t.add_gpu(i)
    for i in range(8):
        for j in range(i + 1, 8):
            if DGX1_LINKS[i][j]:
                t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=DGX1_LINKS[i][j],
                           bandwidth_gbps=25.0 * DGX1_LINKS[i][j])
    return t


def amd_mesh() -> Topology:
    """8 GPUs, every pair joined by Infinity Fabric: 6 links between GPUs of equal parity, 5
    otherwise (38 links of 25 GB/s per GPU), as on AMD boards with uneven xGMI bundles."""
    return parity_mesh(8, 25.0, 6, 5, latency_us=0.0, name="amd-mesh")
