"""The real nccl-tests / rccl-tests logs of tests/fixtures/real_logs as validation cases of the NCCL
model: the machine each log's ``# SOURCE:`` header describes, its class, and the fixed split.

* :data:`CASES`: the first validation set's 12 tables.  :data:`NEW_CASES`, :data:`THIRD_CASES`,
  :data:`FOURTH_CASES`, :data:`FIFTH_CASES`, :data:`SIXTH_CASES`, :data:`SEVENTH_CASES`, :data:`EIGHTH_CASES`,
  :data:`NINTH_CASES`, :data:`TENTH_CASES`, :data:`ELEVENTH_CASES`, :data:`TWELFTH_CASES`, :data:`THIRTEENTH_CASES`,
  :data:`FOURTEENTH_CASES`, :data:`FIFTEENTH_CASES`, :data:`SIXTEENTH_CASES`, :data:`SEVENTEENTH_CASES`,
  :data:`EIGHTEENTH_CASES`, :data:`NINETEENTH_CASES`, :data:`TWENTIETH_CASES`,
  :data:`TWENTY_FIRST_CASES`, :data:`TWENTY_SECOND_CASES`, :data:`TWENTY_THIRD_CASES`,
  :data:`TWENTY_FOURTH_CASES`, :data:`TWENTY_FIFTH_CASES`, :data:`TWENTY_SIXTH_CASES`,
  :data:`TWENTY_SEVENTH_CASES`, :data:`TWENTY_EIGHTH_CASES`, :data:`TWENTY_NINTH_CASES`, :data:`THIRTIETH_CASES`,
  :data:`THIRTY_FIRST_CASES`, :data:`THIRTY_SECOND_CASES`,
  :data:`THIRTY_THIRD_CASES`, :data:`THIRTY_FOURTH_CASES`, :data:`THIRTY_FIFTH_CASES`,
  :data:`THIRTY_SIXTH_CASES`, :data:`THIRTY_SEVENTH_CASES`, :data:`THIRTY_EIGHTH_CASES`,
  :data:`THIRTY_NINTH_CASES`, :data:`FORTIETH_CASES`, :data:`FORTY_FIRST_CASES`,
  :data:`FORTY_SECOND_CASES`, :data:`FORTY_THIRD_CASES`, :data:`FORTY_FOURTH_CASES`: the logs added later.
  :data:`ALL_CASES`: all of them.  The committed constants (``synth/model/nccl/fitted_params.json``) are fitted on
  :data:`IN_SAMPLE`, every in-sample log of them.
* ``machine_class`` names a whole kind of machine (GPU, host fabric and network), not a run size.
* :data:`HELD_OUT_CLASSES`: the fixed held-out split.  No fit ever sees a log of these classes
  (``benchmarks/fit_nccl_model.py`` fits on :data:`IN_SAMPLE` only): they are kinds of machine of
  which no log was in the committed fit, so they say how the model does on a machine it was never
  fitted on.  The other classes are in-sample: every constant of the committed fit is constrained by
  them.
* A table of an in-sample class added after the committed fit is held out on its own
  (``held_out=True``): new data is test data until a deliberate refit takes it in.  :func:`held_out`
  says whether a case is held out, by its class or by itself.
* A log that no machine of the project describes keeps its case with ``skip_reason``: it is listed
  as not predicted instead of being dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    """One log and the machine its header describes."""

    file: str
    preset: str
    nodes: int = 1
    nics_per_node: int | None = None
    nic_gbps: float | None = None
    net_kind: str = "ib"
    env: dict = field(default_factory=dict)
    collective: str | None = None
    why: str = ""
    #: NCCL (major, minor) whose rules the model follows, or (major, minor, patch) where the log prints the release
    #: (its NCCL INFO line, nccl-library= or rccl-tests' "RCCL version :") or, marked by ``release_source``, its
    #: header records the one release the source names for that run; a bare (2, 28), the default for a log that
    #: names none, keeps the rules the model had for it (Blackwell's 2.28.3 tuner rows, 2.28.7's p2p epochs and
    #: NVLS GPU count: synth/model/nccl/versions_patch.py)
    version: tuple = (2, 28)
    #: "header" where the release of ``version`` is not printed in the fixture's log but its SOURCE header names it
    #: for this run (the run's own NCCL debug log or INFO line left out, the image tag, the source's statement);
    #: "" where the log prints it or ``version`` is a bare (major, minor)
    release_source: str = ""
    machine: dict = field(default_factory=dict)
    machine_class: str = ""
    skip_reason: str = ""
    #: a table added after the committed fit, of a class the fit already has: held out from every fit
    #: (a test table) until a deliberate refit takes it in, so that adding data never moves the
    #: constants behind the committed plans
    held_out: bool = False
    #: the table comes from a source (repository, thread, page) an earlier fixture already uses: another
    #: host or run batch, so not independent evidence; the class holdout also reports its count without them
    source_reused: bool = False


#: every machine class, with what it is
CLASSES = {
    "a100-nvswitch-1host": "8 x A100 SXM on NVSwitch, one host",
    "a100-efa-multihost": "A100 SXM hosts over AWS EFA",
    "h100-nvswitch-1host": "8 x H100 SXM on NVSwitch, one host",
    "h100-ib-multihost": "H100 SXM (NVSwitch) hosts over InfiniBand, 2 or more GPUs used per host",
    "h100-efa-multihost": "H100 SXM hosts over AWS EFA v2 (p5)",
    "h100-tcpxo-multihost": "H100 SXM hosts over GCP GPUDirect-TCPXO (A3 Mega)",
    "mi300x-1host": "8 x MI300X on an xGMI mesh, one host",
    "v100-dgx1": "8 x V100 SXM2 hybrid cube mesh (DGX-1), one host",
    "amd-multihost": "AMD Instinct (MI300X, MI355X) hosts over RoCE",
    "b200-ib-multihost": "B200 (NVLink 5, NVSwitch) hosts over InfiniBand",
    "1gpu-per-host": "one GPU per host, every byte between GPUs crosses the network",
    "pcie-multihost": "PCIe-only GPU hosts (no NVLink) over a network",
    "pcie-1host": "PCIe-only GPUs (no NVLink) in one host",
    "b200-nvswitch-1host": "8 x B200 (NVLink 5, NVSwitch), one host",
    "b200-roce-multihost": "B200 (NVLink 5, NVSwitch) hosts over RoCE",
    "mi355x-1host": "8 x MI350X / MI355X (gfx950) on an xGMI mesh, one host",
    "a100-ib-multihost": "A100 SXM (NVSwitch) hosts over InfiniBand",
    "v100-dgx2": "16 x V100 SXM3 on two NVSwitch baseboards (DGX-2), one host",
    "a100-roce-multihost": "A100 SXM (NVSwitch) hosts over RoCE",
    "v100-efa-multihost": "V100 SXM2 (DGX-1 hybrid cube mesh) hosts over AWS EFA",
    "v100-ib-multihost": "V100 SXM2 (DGX-1 hybrid cube mesh) hosts over InfiniBand",
    "v100-roce-multihost": "V100 SXM2 (DGX-1 hybrid cube mesh) hosts over RoCE",
    "b200-nvl72": "Blackwell GPUs (GB200 / GB300, hosts of 4) in one NVL72 rack's multi-node NVLink domain, "
                  "any number of them",
    "h100-nvlink-1host": "4 x Hopper (H100 SXM or GH200) on a direct NVLink mesh (no NVSwitch), one host",
    "h100-roce-multihost": "Hopper SXM (H100 / H200, NVSwitch) hosts over RoCE",
    "a100-nvlink-1host": "A100 SXM on a direct NVLink mesh (the 4-GPU board, no NVSwitch), one host",
}

#: the fixed held-out split (see the module docstring)
HELD_OUT_CLASSES = ("amd-multihost", "b200-ib-multihost", "1gpu-per-host", "pcie-multihost", "pcie-1host",
                    "b200-nvswitch-1host", "b200-roce-multihost", "mi355x-1host", "a100-ib-multihost",
                    "v100-dgx2", "a100-roce-multihost", "v100-efa-multihost", "v100-ib-multihost",
                    "v100-roce-multihost", "b200-nvl72",
                    "h100-nvlink-1host", "h100-roce-multihost", "a100-nvlink-1host")

_H100_2NODE = "2 x 8 H100, InfiniBand (8 x 400 Gb/s NDR assumed: a DGX H100 host)"

CASES = [
    Case("a100_8gpu_1node_all_reduce.txt", "dgx-a100", why="8 x A100-SXM4-80GB, NVSwitch, one process (-g 8)",
         machine_class="a100-nvswitch-1host"),
    Case("a100_8gpu_1node_sendrecv.txt", "dgx-a100", collective="sendrecv", why="8 x A100 NVSwitch, sendrecv -g 8",
         machine_class="a100-nvswitch-1host"),
    Case("a100_aws_p4de_16gpu_2node_all_reduce.txt", "dgx-a100", 2, 4, 12.5, "efa", version=(2, 20),
         machine={"cpu_vendor": "intel"}, machine_class="a100-efa-multihost",
         why="2 x p4de.24xlarge: 4 x 100 Gb/s EFA per node, Xeon 8275CL, NCCL 2.20 (not printed: the table first "
             "appears in the README at commit 88c2e71b, 2024-04-19, whose version table and Dockerfile pin "
             "NCCL_VERSION 2.20.3 and aws-ofi-nccl 1.8.1; it said 2.27, the README default of the later commit "
             "quoted; aws-ofi-nccl sets NCCL_PROTO=simple)"),
    Case("h100_16gpu_2node_alltoall_sendrecv.txt", "dgx-h100", 2, collective="alltoall", why=_H100_2NODE,
         machine_class="h100-ib-multihost"),
    Case("h100_16gpu_2node_alltoall_sendrecv.txt", "dgx-h100", 2, collective="sendrecv",
         why="the same job's sendrecv test", machine_class="h100-ib-multihost"),
    Case("h100_8gpu_1node_all_gather_ring.txt", "dgx-h100", env={"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0"},
         version=(2, 26, 2), machine_class="h100-nvswitch-1host",
         why="8 x H100 SXM5 NVSwitch, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off, -g 8"),
    Case("h100_8gpu_1node_all_reduce_ring.txt", "dgx-h100",
         env={"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}, version=(2, 26, 2),
         machine_class="h100-nvswitch-1host",
         why="8 x H100 SXM5 NVSwitch, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off, -g 8"),
    Case("h100_8gpu_1node_all_reduce_nvls.txt", "dgx-h100", version=(2, 26, 2), machine_class="h100-nvswitch-1host",
         why="8 x H100 SXM5 NVSwitch, NCCL 2.26.2, NCCL defaults (NVLS), -g 8: the published ~479 GB/s"),
    Case("h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt", "dgx-h100", 2, 32, 12.5, "efa2", version=(2, 22, 3),
         machine={"cpu_vendor": "amd"}, machine_class="h100-efa-multihost",
         why="2 x p5.48xlarge: 32 x 100 Gb/s EFA per node, EPYC 7R13, NCCL 2.22.3, NVLS on"),
    Case("h100_gcp_a3mega_16gpu_2node_all_reduce.txt", "dgx-h100", 2, 8, 25.0, "tcpxo", version=(2, 23),
         machine_class="h100-tcpxo-multihost",
         why="2 x a3-megagpu-8g: 8 x 200 Gb/s GPUDirect-TCPXO NICs per node, Xeon 8481C; committed 2025-04-02 (the "
             "TCPXO release then current, Feb 06 2025, ships NCCL 2.23 and its 2.21.5-2.23.4 profile)"),
    Case("mi300x_8gpu_1node_all_reduce.txt", "mi300x", why="8 x MI300X xGMI mesh, RCCL, one process per GPU",
         machine_class="mi300x-1host"),
    Case("v100_8gpu_dgx1_hybridcubemesh_1node_all_reduce.txt", "dgx1-v100", version=(2, 4),
         machine_class="v100-dgx1",
         why="8 x V100-SXM2 hybrid cube mesh (DGX-1), -g 8, 2019 (before LL128: NCCL 2.4 gates)"),
]

_XE = "8 x 400 Gb/s CX-7 InfiniBand per host (stated)"
_GJ = ("H100 hosts of one 8-host cluster, \"IB 400G\" (stated), 8 NICs per host and NCCL version not stated "
       "(8 x 400 Gb/s and NCCL 2.28 gates assumed)")
_C01 = ("H100 cluster01 of xxrjun/nccl-tests-cluster, NCCL 2.29.2 (the log prints it; 2.29 gates); InfiniBand, "
        "one 400 Gb/s NIC per GPU inferred from ~49 GB/s busbw per GPU used (not stated)")
_C00 = "H100 cluster00 of xxrjun/nccl-tests-cluster, NCCL 2.28.7, InfiniBand (8 x 400 Gb/s NDR assumed)"
_C00_CNODE2 = ("the NICs of the cnode2 hosts are not stated, and the log contradicts the cnode4 hosts' "
               "(8 x 400 Gb/s, NCCL's own debug log): one GPU per host sends at 13.5 GB/s where cnode4 reaches "
               "27.3, four at 14.6 per GPU where cnode4 reaches 28.9")
_C00_CNODE4 = ("H100 cluster00 of xxrjun/nccl-tests-cluster, cnode4 hosts, NCCL 2.28.3 (a separately committed debug "
               "log of the 2 x 1 GPU pair, not this log: the Cases keep a bare 2.28), 8 x 400 Gb/s IB (NCCL's debug log)")
_B200 = ("8 x B200 per host (the `hgx-b200` preset: NVLink 5 via NVSwitch), 8 x 400 Gb/s CX-7 IB (stated), "
         "NCCL 2.29.7, NVLS and SHARP off")
_NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}

NEW_CASES = [
    Case("h100_16gpu_2node_all_reduce_ib_xe9680.txt", "dgx-h100", 2, version=(2, 26, 2),
         machine_class="h100-ib-multihost",
         why=f"2 x Dell XE9680 (HGX H100), {_XE}, NCCL 2.26.2, NCCL defaults (NVLSTree)"),
    Case("h100_32gpu_4node_all_reduce_ib_vm.txt", "dgx-h100", 4, version=(2, 26, 2), machine_class="h100-ib-multihost",
         why=f"4 HGX H100 virtual machines, {_XE}, NCCL 2.26.2, NCCL defaults, topology from NCCL_TOPO_FILE"),
    Case("h100_16gpu_2node_all_reduce_ib_8nodecluster.txt", "dgx-h100", 2, machine_class="h100-ib-multihost",
         why=f"2 {_GJ}, NCCL defaults"),
    Case("h100_16gpu_2node_all_reduce_ib_8nodecluster_ring.txt", "dgx-h100", 2,
         env={"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "24"}, machine_class="h100-ib-multihost",
         why=f"2 {_GJ}, NCCL_ALGO=Ring NCCL_MIN_CTAS=24 (NCCL_IB_QPS_PER_CONNECTION=2: no model term)"),
    Case("h100_32gpu_4node_all_reduce_ib_8nodecluster.txt", "dgx-h100", 4, machine_class="h100-ib-multihost",
         why=f"4 {_GJ}, NCCL defaults"),
    Case("h100_64gpu_8node_all_reduce_ib_8nodecluster.txt", "dgx-h100", 8, machine_class="h100-ib-multihost",
         why=f"8 {_GJ}, NCCL defaults"),
    Case("h100_64gpu_8node_all_reduce_ib_8nodecluster_tuned.txt", "dgx-h100", 8, machine_class="h100-ib-multihost",
         env={"NCCL_MIN_CTAS": "24"},
         why=f"8 {_GJ}, NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2 (the QPs have no model term)"),
    Case("h100_80gpu_10node_all_reduce_5tests_8gpn.txt", "dgx-h100", 10, collective="allreduce",
         version=(2, 29, 2), machine_class="h100-ib-multihost", why=f"10 x 8 {_C01}, double, 32 MiB..16 GiB"),
    Case("h100_40gpu_10node_all_reduce_5tests_4gpn.txt", "dgx-h100", 10, 4, collective="allreduce",
         machine={"ranks": 40}, version=(2, 29, 2), machine_class="h100-ib-multihost",
         why=f"10 hosts x 4 GPUs of {_C01}: 4 GPUs and their 4 NICs per host"),
    Case("h100_20gpu_10node_all_reduce_5tests_2gpn.txt", "dgx-h100", 10, 2, collective="allreduce",
         machine={"ranks": 20}, version=(2, 29, 2), machine_class="h100-ib-multihost",
         why=f"10 hosts x 2 GPUs of {_C01}: 2 GPUs and their 2 NICs per host"),
    *[Case("h100_20gpu_10node_all_reduce_5tests_2gpn.txt", "dgx-h100", 10, 2, collective=coll,
           machine={"ranks": 20}, version=(2, 29, 2), machine_class="h100-ib-multihost", held_out=True,
           source_reused=True, why="the same job's other tests")
      for coll in ("allgather", "reducescatter", "alltoall", "sendrecv")],
    Case("h100_8gpu_2node_alltoall_sendrecv_4gpn.txt", "dgx-h100", 2, 4, collective="alltoall",
         machine={"ranks": 8}, machine_class="h100-ib-multihost", version=(2, 28, 7),
         why=f"2 hosts x 4 GPUs of {_C00}: 4 GPUs and 4 NICs per host", skip_reason=_C00_CNODE2),
    Case("h100_8gpu_2node_alltoall_sendrecv_4gpn_cnode4.txt", "dgx-h100", 2, 4, collective="alltoall",
         machine={"ranks": 8}, machine_class="h100-ib-multihost", version=(2, 28),
         why=f"2 hosts x 4 GPUs of {_C00_CNODE4}: 4 GPUs and their 4 NICs per host"),
    Case("h100_8gpu_2node_alltoall_sendrecv_4gpn_cnode4.txt", "dgx-h100", 2, 4, collective="sendrecv",
         machine={"ranks": 8}, machine_class="h100-ib-multihost", version=(2, 28),
         why="the same job's sendrecv test"),
    Case("h100_8gpu_1node_all_reduce_5tests_cluster01.txt", "dgx-h100", collective="allreduce",
         version=(2, 29, 2), machine_class="h100-nvswitch-1host",
         why="8 x H100 80GB HBM3 of cluster01, NCCL 2.29.2, defaults (NVLS)"),
    Case("mi300x_16gpu_2node_all_reduce_roce.txt", "mi300x", 2, 8, 50.0, "roce", version=(2, 22, 3),
         machine_class="amd-multihost",
         why="2 x 8 MI300X, 8 mlx5 RoCE NICs per host (speed not stated: 400 Gb/s assumed), RCCL 2.22.3"),
    Case("mi355x_16gpu_2node_all_reduce_pollara.txt", "mi355x", 2, 8, 50.0, "roce", version=(2, 26, 6),
         machine_class="amd-multihost",
         why="2 x 8 MI355X (the `mi355x` preset), 8 x AMD Pollara 400 Gb/s per host (stated), RCCL 2.26.6"),
    Case("b200_32gpu_4node_sendrecv.txt", "hgx-b200", 4, 8, 50.0, env=_NO_NVLS, machine_class="b200-ib-multihost",
         version=(2, 29, 7), why=f"4 hosts: {_B200}"),
    Case("b200_64gpu_8node_sendrecv.txt", "hgx-b200", 8, 8, 50.0, env=_NO_NVLS, machine_class="b200-ib-multihost",
         version=(2, 29, 7), why=f"8 hosts: {_B200}"),
    Case("b200_16gpu_2node_sendrecv.txt", "hgx-b200", 2, 8, 50.0, env=_NO_NVLS, machine_class="b200-ib-multihost",
         version=(2, 29, 7), release_source="header", why=f"2 hosts: {_B200}"),
    Case("b200_128gpu_16node_sendrecv.txt", "hgx-b200", 16, 8, 50.0, env=_NO_NVLS, machine_class="b200-ib-multihost",
         version=(2, 29, 7), why=f"16 hosts: {_B200}"),
    Case("b200_512gpu_64node_sendrecv.txt", "hgx-b200", 64, 8, 50.0, env=_NO_NVLS, machine_class="b200-ib-multihost",
         version=(2, 29, 7), why=f"64 hosts: {_B200}"),
    Case("h100_10gpu_10node_all_reduce_5tests_1gpn.txt", "dgx-h100", 10, 1, collective="allreduce",
         machine={"ranks": 10}, version=(2, 29, 2), machine_class="1gpu-per-host",
         why=f"10 hosts x 1 GPU of {_C01}: one GPU and its NIC per host"),
    *[Case("h100_10gpu_10node_all_reduce_5tests_1gpn.txt", "dgx-h100", 10, 1, collective=coll,
           machine={"ranks": 10}, version=(2, 29, 2), machine_class="1gpu-per-host", source_reused=True,
           why="the same job's other tests")
      for coll in ("allgather", "reducescatter", "alltoall", "sendrecv")],
    Case("h100_2gpu_2node_alltoall_sendrecv_1gpn.txt", "dgx-h100", 2, 1, collective="sendrecv",
         machine={"ranks": 2}, machine_class="1gpu-per-host", why=f"2 hosts x 1 GPU of {_C00}: one NIC per host",
         skip_reason=_C00_CNODE2, version=(2, 28, 7)),
    Case("h100_2gpu_2node_alltoall_sendrecv_1gpn_cnode4.txt", "dgx-h100", 2, 1, collective="alltoall",
         machine={"ranks": 2}, machine_class="1gpu-per-host",
         why=f"2 hosts x 1 GPU of {_C00_CNODE4}: one GPU and its NIC per host", version=(2, 28)),
    Case("h100_2gpu_2node_alltoall_sendrecv_1gpn_cnode4.txt", "dgx-h100", 2, 1, collective="sendrecv",
         machine={"ranks": 2}, machine_class="1gpu-per-host", why="the same job's sendrecv test", version=(2, 28)),
    Case("rtx4090_8gpu_1node_all_reduce_shm.txt", "l40s-8gpu-pcie", machine={"cpu_vendor": "amd"},
         machine_class="pcie-1host",
         why="8 x RTX 4090 (Ada, PCIe Gen4 x16), 2 x EPYC 7542, no PCIe switch, every pair SYS, P2P off (SHM), -g 8"),
    Case("rtx5090_4gpu_1node_all_reduce_shm.txt", "l40s-8gpu-pcie", version=(2, 26),
         machine={"arch": "sm120", "ranks": 4, "pcie_gen": 5, "cpu_vendor": "amd", "sockets": 1},
         machine_class="pcie-1host",
         why="4 x RTX 5090 (PCIe 5.0 x16) on an EPYC Genoa host, no P2P (GeForce: SHM), NCCL 2.26.2, -g 4"),
    Case("l40s_2gpu_2node_all_reduce_socket_1gpn.txt", "pcie-8gpu-2socket", 2, 1, net_kind="socket",
         machine={"ranks": 2}, machine_class="1gpu-per-host",
         skip_reason="the NIC speed behind NCCL's socket transport is not stated: no machine can be described",
         version=(2, 27, 3)),
    Case("l40s_4gpu_2node_all_reduce_roce_2gpn.txt", "pcie-8gpu-2socket", 2, net_kind="roce",
         machine={"ranks": 4}, machine_class="pcie-multihost",
         skip_reason="the count and speed of the RoCE NICs per host are not stated (the GPUs would be "
                     "the `l40s-8gpu-pcie` preset's)", version=(2, 27, 3)),
]

_A4 = ("GCP a4-highgpu-8g: 8 x B200 (the `hgx-b200` preset), 8 x 400 Gb/s ConnectX-7 RoCE NICs per host through "
       "Google's gIB NCCL plugin")

#: the third set: logs from sources no earlier fixture uses, of machine classes no fit has seen (all held out)
THIRD_CASES = [
    Case("b200_8gpu_1node_all_reduce_gcp_a4.txt", "hgx-b200", version=(2, 26), machine_class="b200-nvswitch-1host",
         why="8 x B200 of a GCP a4-highgpu-8g, NGC 25.04 (NCCL 2.26), NCCL defaults (NVLS), -g 8"),
    Case("b200_16gpu_2node_all_reduce_gcp_a4_roce.txt", "hgx-b200", 2, 8, 50.0, "roce", version=(2, 26),
         machine_class="b200-roce-multihost", why=f"2 x {_A4}, NGC 25.04 (NCCL 2.26), NCCL defaults"),
    Case("b200_16gpu_2node_all_gather_gcp_a4_roce.txt", "hgx-b200", 2, 8, 50.0, "roce", version=(2, 26, 6),
         machine_class="b200-roce-multihost", why=f"2 x {_A4}, NCCL 2.26.6, NCCL defaults",
         skip_reason="the run contradicts the other log of the same machine kind (2 x GCP A4, gIB): its all_gather "
                     "takes 981 us at 8 MiB where that log's all_reduce, which moves twice the bytes per rank, takes "
                     "159 us, and it needs 246-320 us at 1-64 KiB, a floor no other NVIDIA log of the fixtures comes "
                     "near; the post runs NVIDIA's gIB diagnostic image under an experimental network driver "
                     "(DraNet) and shows a later run of it at half this speed"),
    Case("mi350x_8gpu_1node_all_reduce.txt", "mi355x", version=(2, 26), machine_class="mi355x-1host",
         why="8 x MI350X (gfx950, the `mi355x` preset's xGMI mesh), ROCm 7.0 RCCL, -g 8"),
]

_ABCI = ("ABCI 2.0 'Compute Node (A)' hosts (aistabci/abci2.0benchmark): 8 x A100-SXM4-40GB (the `dgx-a100` "
         "preset's NVSwitch), Xeon Platinum 8360Y CPUs (the header; not the preset's EPYC), 4 x InfiniBand HDR "
         "200 Gb/s per host (ABCI's documentation, not the repository), NCCL 2.8.4, one process per GPU; "
         "NCCL_NET_GDR_LEVEL=2 (no model term)")

#: GB/s per direction one NIC of these hosts moves GPU memory at: the same repository's OSU osu_mbw_mr between two
#: such hosts, GPU buffers (pt2pt/inter_anode jobs 7249072 / 7249073: 39.0 GB/s for 4 and for 8 GPU pairs), over
#: their 4 HCAs (:attr:`synth.model.nccl.machine.NcclMachine.gpu_net_gbps`)
ABCI_NIC_DMA_GBS = 39.0 / 4
_ABCI_DMA = ("GPU memory crosses the network at 39.0 GB/s per host and direction (the repository's pt2pt/inter_anode "
             "OSU osu_mbw_mr -d cuda, 4 and 8 GPU pairs; host buffers 95 GB/s): nic_dma_gbs 9.75 per HCA")

#: the fourth set: ABCI 2.0's A100 logs (all_reduce and broadcast, 4 B - 32 MiB), added after the committed
#: fit: the one-host tables are of the in-sample A100 class but held out themselves, the multi-host ones form a
#: new held-out class
FOURTH_CASES = [
    Case("a100_8gpu_1node_all_reduce_abci.txt", "dgx-a100", version=(2, 8, 4),
         release_source="header", machine_class="a100-nvswitch-1host",
         machine={"cpu_vendor": "intel"}, why=f"one host of {_ABCI}", held_out=True),
    Case("a100_8gpu_1node_broadcast_abci.txt", "dgx-a100", version=(2, 8, 4),
         release_source="header", machine_class="a100-nvswitch-1host",
         machine={"cpu_vendor": "intel"}, why=f"one host of {_ABCI}, broadcast", held_out=True),
] + [Case(f"a100_{8 * n}gpu_{n}node_{coll}_abci_hdr.txt", "dgx-a100", n, 4, 25.0, version=(2, 8, 4),
          release_source="header",
          machine={"nic_dma_gbs": ABCI_NIC_DMA_GBS, "cpu_vendor": "intel"}, machine_class="a100-ib-multihost",
          why=f"{n} x {_ABCI}; {_ABCI_DMA}" + (", broadcast" if coll == "broadcast" else ""))
     for n in (2, 4, 8, 16) for coll in ("all_reduce", "broadcast")]

_THANOS = ("one host of 8 x A100-SXM4-80GB, 12 NVLinks of 25 GB/s per GPU (the `dgx-a100` preset's NVSwitch board), "
           "NCCL from pip nvidia-nccl-cu12 (version not stated: 2.28 gates assumed)")

#: the fifth set: logs from sources no earlier fixture uses, added after the committed fit; each is held out itself
#: (its class is in-sample, so the class holdout would otherwise fit on it)
FIFTH_CASES = [
    Case("mi300x_8gpu_1node_all_reduce_rocmblog_rccl2.22.txt", "mi300x", version=(2, 22, 3),
         machine_class="mi300x-1host",
         why="8 x MI300X xGMI mesh (AMD ROCm blog, March 2025), RCCL 2.22.3, one process per GPU (-g 1)",
         held_out=True),
    Case("a100_8gpu_1node_all_reduce_thanos_np8.txt", "dgx-a100", machine_class="a100-nvswitch-1host",
         why=f"{_THANOS}, one MPI process per GPU (-g 1): the second run of the host whose -g 8 run is "
             "a100_8gpu_1node_all_reduce.txt", held_out=True, source_reused=True),
]

_CNODE2 = ("one host (cnode2-003) of example-cluster00 of xxrjun/nccl-tests-cluster (H100 80GB HBM3: the `dgx-h100` "
           "preset's NVSwitch assumed), its single-node suite of run 2511, NCCL 2.28.7, defaults (NVLS), double, "
           "32 MiB..16 GiB")
_RUN0128 = f"{_C01}; run 2026-01-28 14:50 (the other 10-host fixtures are run 2026-01-29), double, 32 MiB..16 GiB"
_DGX2 = ("12 of the 16 V100-SXM3-32GB of a DGX-2 (the `dgx2` preset; GPUs 1, 2, 6-15: both baseboards) from one process "
         "(-g 12), another user's job on the other 4 GPUs, the author's own NCCL build of February 2020 (version not "
         "printed: 2.5 assumed, the release of that month), defaults")
_COLLS = ("allgather", "reducescatter", "alltoall", "allreduce", "sendrecv")

#: the sixth set (issue 36): tables added after the committed fit, described from their sources before any
#: prediction; the H100 ones are of in-sample classes and held out themselves, the DGX-2 ones a new held-out class
SIXTH_CASES = [
    *[Case("h100_8gpu_1node_5tests_cnode2.txt", "dgx-h100", collective=c, machine_class="h100-nvswitch-1host",
           held_out=True, source_reused=True, why=f"8 GPUs, {_CNODE2}", version=(2, 28, 7)) for c in _COLLS],
    *[Case("h100_4gpu_1node_5tests_cnode2.txt", "dgx-h100", collective=c, machine={"ranks": 4},
           machine_class="h100-nvswitch-1host", held_out=True, source_reused=True,
           why=f"4 of the 8 GPUs (0-3), {_CNODE2}", version=(2, 28, 7)) for c in _COLLS],
    *[Case("h100_80gpu_10node_5tests_8gpn_run0128.txt", "dgx-h100", 10, collective=c, version=(2, 29, 2),
           machine_class="h100-ib-multihost", held_out=True, source_reused=True,
           why=f"10 hosts x 8 GPUs of {_RUN0128}") for c in _COLLS],
    *[Case("h100_40gpu_10node_5tests_4gpn_run0128.txt", "dgx-h100", 10, 4, collective=c, machine={"ranks": 40},
           version=(2, 29, 2), machine_class="h100-ib-multihost", held_out=True, source_reused=True,
           why=f"10 hosts x 4 GPUs (and their 4 NICs) of {_RUN0128}") for c in _COLLS],
    *[Case(f"v100_12gpu_dgx2_1node_{name}.txt", "dgx2", version=(2, 5), machine={"ranks": 12},
           machine_class="v100-dgx2", why=_DGX2) for name in ("all_reduce", "broadcast", "reduce", "reduce_scatter")],
    Case("v100_12gpu_dgx2_1node_all_gather.txt", "dgx2", version=(2, 5), machine={"ranks": 12},
         machine_class="v100-dgx2", why=_DGX2,
         skip_reason="the run fails nccl-tests' own check (\"Out of bounds values : 4 FAILED\", at 4 and 8 GiB) and "
                     "from 64 MiB on its out-of-place runs are a third below its in-place runs (67-74 against "
                     "103-112 GB/s busbw): it does not measure one behaviour"),
]

_OCI = ("OCI BM.GPU4.8 (Oracle Japan's OCI tutorial): 8 x A100-SXM4-40GB (the `dgx-a100` preset's NVSwitch), "
        "horovod/horovod:latest container, NCCL version not printed: 2.9 from the image's recipe (horovod/horovod "
        "docker/horovod/Dockerfile ARG NCCL_VERSION=2.9.9-1+cuda11.3 from commit 69543913, 2022-10-10, through the "
        "last release v0.28.1 and HEAD 2626dc87; 2.8.4 before)")
_I290 = ("2 hosts of NVIDIA/nccl-tests#290: 8 x H100 80GB HBM3 each (the `dgx-h100` preset), 8 x 400 Gb/s NDR "
         "CX-7 InfiniBand per host (stated), NCCL version not stated (2.28 gates assumed); the author reports "
         "the 2-host runs as degraded")
_DEGRADED_290 = ("the thread reports this 2-host run as degraded (\"observed some performance degradation\"; "
                 "NVIDIA's reply expects 46-48 GB/s per NDR NIC, which is what the model predicts): a fault of "
                 "that fabric, not NCCL's behaviour on the machine described")

#: the seventh set (issue 36): tables from sources no earlier fixture and no unseen-set entry uses, described from
#: their sources before any prediction; the A100 one-host and H100 ones are of in-sample classes (each held out
#: itself), the A100 RoCE one forms the new held-out class a100-roce-multihost
SEVENTH_CASES = [
    Case("a100_8gpu_1node_all_reduce_oci_bm_gpu4.txt", "dgx-a100", machine_class="a100-nvswitch-1host", version=(2, 9),
         why=f"one host of {_OCI}, one process (-g 8), NCCL defaults", held_out=True),
    Case("a100_16gpu_2node_all_reduce_oci_roce.txt", "dgx-a100", 2, 16, 12.5, "roce", version=(2, 9),
         machine_class="a100-roce-multihost",
         why=f"2 x {_OCI}, 16 x 100 Gb/s RoCE v2 ports per host (stated), all 16 in NCCL_IB_HCA, -g 1"),
    Case("h100_16gpu_2node_all_reduce_ib_issue290.txt", "dgx-h100", 2, 8, 50.0, machine_class="h100-ib-multihost",
         why=f"{_I290}; NCCL defaults", held_out=True, skip_reason=_DEGRADED_290),
    Case("h100_16gpu_2node_all_reduce_ib_issue290_ring.txt", "dgx-h100", 2, 8, 50.0, env={"NCCL_ALGO": "RING"},
         machine_class="h100-ib-multihost", held_out=True,
         why=f"{_I290}; NCCL_ALGO=RING (NCCL_IB_QPS_PER_CONNECTION=2, NCCL_IB_SPLIT_DATA_ON_QPS=0, "
             "NCCL_IB_AR_THRESHOLD=0, relaxed ordering: no model term)", skip_reason=_DEGRADED_290),
    Case("h100_2gpu_1node_all_reduce_do_baremetal.txt", "dgx-h100", machine={"ranks": 2},
         machine_class="h100-nvswitch-1host", held_out=True,
         why="2 of the 8 H100 80GB HBM3 (the `dgx-h100` preset's NVSwitch assumed from the part name) of a "
             "DigitalOcean bare-metal host, one process (-g 2), NCCL version not stated (2.28 gates assumed)"),
]

_P4D = ("2 x AWS p4d.24xlarge (the AWS DLAMI guide's later \"Using EFA on the DLAMI\" page): 8 x A100-SXM4-40GB "
        "(the `dgx-a100` preset's NVSwitch), 4 EFA NICs per host (\"found 4 nics\"; 100 Gb/s each and the Xeon "
        "8275CL: AWS's instance documentation), NCCL 2.23.4, aws-ofi-nccl 1.13.2, -g 1")
_OKE = ("2 OKE bare-metal A100 nodes of oracle-quickstart/oci-hpc-oke: 8 x A100-SXM4-40GB (BM.GPU4.8, the `dgx-a100` "
        "preset's NVSwitch), 16 SR-IOV RDMA VFs on 16 x 100 Gb/s RoCE ports per host (the repository's NCCL "
        "topology file), AMD CPU, NCCL 2.19.3 (image tag), -g 1; NCCL_CROSS_NIC=1, NCCL_IB_QPS_PER_CONNECTION=4 "
        "and the NCCL_TOPO_FILE have no model term")

#: the eighth set (issue 36): tables from sources no earlier fixture and no unseen-set entry uses, described from
#: their sources before any prediction; the A100-over-EFA, MI300X and H100 one-host ones are of in-sample classes
#: (each held out itself), the A100 RoCE one is of the held-out class a100-roce-multihost, the V100-over-EFA one
#: forms the new held-out class v100-efa-multihost
EIGHTH_CASES = [
    Case("v100_16gpu_2node_all_reduce_aws_p3dn_efa.txt", "dgx1-v100", 2, 1, 12.5, "efa", version=(2, 4, 8),
         env={"NCCL_TREE_THRESHOLD": "0"}, machine_class="v100-efa-multihost",
         why="2 x AWS p3dn.24xlarge (AWS DLAMI guide, 2019-2020): 8 x V100-SXM2-32GB (the `dgx1-v100` preset's hybrid "
             "cube mesh: AWS's instance documentation), one 100 Gb/s EFA per host (AWS's instance documentation), "
             "NCCL 2.4.8, -g 1; NCCL_TREE_THRESHOLD=0 (ring at every size, NCCL's own log)"),
    Case("a100_16gpu_2node_all_reduce_aws_p4d_efa.txt", "dgx-a100", 2, 4, 12.5, "efa", version=(2, 23, 4),
         release_source="header",
         machine={"cpu_vendor": "intel"}, machine_class="a100-efa-multihost", held_out=True, why=_P4D),
    Case("a100_16gpu_2node_all_reduce_oci_oke_roce.txt", "dgx-a100", 2, 16, 12.5, "roce", version=(2, 19, 3),
         release_source="header",
         machine={"cpu_vendor": "amd"}, machine_class="a100-roce-multihost", why=_OKE),
    Case("mi300x_8gpu_1node_all_reduce_amd_acceptance_guide.txt", "mi300x", machine_class="mi300x-1host",
         held_out=True,
         why="8 x MI300X on one Supermicro host (AMD's MI300X customer acceptance test guide), one process (-g 8), "
             "rccl-tests develop:ae3e635, RCCL version not printed (2.28 gates assumed), no RCCL variable set"),
    Case("h100_8gpu_1node_all_reduce_dgxc_recipe.txt", "dgx-h100", machine_class="h100-nvswitch-1host",
         held_out=True,
         why="one DGX H100 host (8 x H100 80GB HBM3, NVSwitch) of NVIDIA's DGX Cloud NCCL recipe, 8 processes "
             "(-g 1), NeMo 25.09 container (NCCL version not printed: 2.28 gates assumed), NCCL defaults (NVLS)"),
]

_P5 = ("p5.48xlarge: 8 x H100 80GB HBM3 SXM5 on NVSwitch (the `dgx-h100` preset), 32 x 100 Gb/s EFA v2 and AMD "
       "EPYC 7R13 (AWS's instance documentation)")

#: the ninth set: two AWS p5 all_reduce tables of aws-samples/awsome-distributed-training, the repository of the
#: first set's p4de log (so ``source_reused``), described from their sources before any prediction; both classes
#: are in-sample, so each table is held out itself
NINTH_CASES = [
    Case("h100_8gpu_1node_all_reduce_aws_p5_batch.txt", "dgx-h100", version=(2, 23), machine={"cpu_vendor": "amd"},
         machine_class="h100-nvswitch-1host", held_out=True, source_reused=True,
         why=f"one {_P5}, AWS Batch job (mpirun -np 8 -N 8, -g 1: 8 processes on one host), NCCL defaults (NVLS), "
             "NCCL_BUFFSIZE=8388608 and aws-ofi-nccl's tuner plugin (no model term), NCCL not printed (the "
             "image's Dockerfile of that commit: 2.23.4)"),
    Case("h100_16gpu_2node_all_reduce_aws_p5_efa_readme.txt", "dgx-h100", 2, 32, 12.5, "efa2", version=(2, 20),
         machine={"cpu_vendor": "amd"}, machine_class="h100-efa-multihost", held_out=True, source_reused=True,
         why=f"2 x {_P5}, Slurm srun 16 tasks (-g 1), NCCL defaults, NCCL_BUFFSIZE=8388608 (no model term), "
             "NCCL not printed (the README's own build of that commit: 2.20.3, aws-ofi-nccl 1.8.1)"),
]

#: GB/s per direction of the slowest hop of the ring NCCL builds, by each source's CUDA p2pBandwidthLatencyTest
#: (unidirectional, P2P on, rows = senders; :attr:`synth.model.nccl.machine.NcclMachine.p2p_write_gbs`).  Every GPU
#: pair scores alike in NCCL's search when every GPU hangs off its own CPU node (NCCL joins every pair of CPU nodes,
#: NVIDIA/nccl v2.28.9-1 src/graph/topo.cc lines 264-277) and ties go by start index (search.cc lines 191-200 and
#: 242-254), so the ring is 0->1->...->7->0 (with GPUs 0-3 on one socket, a same-socket-first order gives the same
#: ring).  The 8 x RTX 4090 host after the P2P patch (blog.chlc.cc, "RTX4090 GPUDirect P2P Unlocked!"; one NUMA node
#: per GPU, GPUs 0-3 on one socket): 25.6-26.0 within a socket, 3->4 22.14 and 7->0 21.32 across, so 21.3 (6->0's
#: 20.57 is a pair the ring never uses); the 8 x RTX 5090 host (aikitoria/open-gpu-kernel-modules README, commit
#: 08dc345, devices 1-8): 56.55-56.58 within a socket, 55.62 at both socket crossings (the matrix's low end 55.59), so
#: 55.6 (P2P rings only: the 4 x A100 PCIe page states P2P-on figures but its ring is SHM, so it has none)
RTX4090_P2P_RING_GBS = 21.3
RTX5090_P2P_RING_GBS = 55.6
_NC12S = ("one Azure Standard_NC12s_v3 VM (marconetto/azadventures): 2 x Tesla V100-PCIE-16GB (PCIe Gen3), a NODE pair "
          "on the VM's one NUMA node, Intel host CPU (Azure's NCv3 documentation), so NCCL's SHM transport; NCCL "
          "version not printed (2.28 gates assumed)")

#: the tenth set: PCIe-only one-host tables (class pcie-1host, held out) from sources no earlier fixture uses,
#: each described from its source before any prediction
TENTH_CASES = [
    Case("rtx5090_8gpu_1node_all_reduce_p2p_sys.txt", "l40s-8gpu-pcie", version=(2, 29, 7),
         machine={"arch": "sm120", "pcie_gen": 5, "cpu_vendor": "amd", "sockets": 2, "p2p": True,
                  "p2p_write_gbs": RTX5090_P2P_RING_GBS},
         machine_class="pcie-1host",
         why="8 x RTX 5090 (PCIe 5.0 x16, no NVLink) on a dual-socket EPYC 9575F host "
             "(aikitoria/open-gpu-kernel-modules README), P2P enabled by the patched driver and NCCL_P2P_LEVEL=SYS "
             "(no model term: P2P between every pair, `p2p`), NCCL 2.29.7, -g 8"),
    Case("a100pcie_4gpu_1node_all_reduce_shm_sys.txt", "l40s-8gpu-pcie",
         machine={"arch": "sm80", "ranks": 4, "pcie_gen": 3},
         machine_class="pcie-1host",
         why="4 x A100-PCIE-40GB, every pair SYS, 2 sockets x 10 cores (Intel inferred), PCIe Gen3 rate measured by "
             "the page's p2pBandwidthLatencyTest (Gen3 slots inferred), NCCL's SHM transport (default P2P level), "
             "NCCL version not printed (2.28 gates assumed), -g 4"),
    Case("rtx4090_8gpu_1node_all_reduce_p2p_unlocked.txt", "l40s-8gpu-pcie",
         machine={"cpu_vendor": "amd", "p2p": True, "p2p_write_gbs": RTX4090_P2P_RING_GBS},
         machine_class="pcie-1host", source_reused=True,
         why="the host of rtx4090_8gpu_1node_all_reduce_shm.txt (8 x RTX 4090, 2 x EPYC 7542, every pair SYS) after "
             "tinygrad's P2P driver patch: P2P between every pair (NCCL's default P2P level on AMD CPUs is SYS), "
             "NCCL version not printed (2.28 gates assumed), -g 8"),
    Case("v100pcie_2gpu_1node_all_reduce_azure_nc12sv3.txt", "l40s-8gpu-pcie",
         machine={"arch": "sm70", "ranks": 2, "pcie_gen": 3, "sockets": 1}, machine_class="pcie-1host",
         why=f"{_NC12S}; one process (-g 2)"),
    Case("v100pcie_2gpu_1node_all_reduce_azure_nc12sv3_np2.txt", "l40s-8gpu-pcie",
         machine={"arch": "sm70", "ranks": 2, "pcie_gen": 3, "sockets": 1}, machine_class="pcie-1host",
         source_reused=True,
         why=f"{_NC12S}; the page's second run: 2 MPI processes (-g 1), NCCL_P2P_LEVEL=NVL (SHM either way)"),
]

_H800 = ("8 x NVIDIA H800 (SXM, NVSwitch: NVLS multicast in NCCL's log) on one host; the H800 has 8 NVLink4 links "
         "(400 GB/s both directions, NVIDIA's data sheet), so the `dgx-h100` preset with links_per_gpu=8")

#: the eleventh set: NVLink / NVSwitch tables from sources no earlier fixture uses, described from their sources
#: before any prediction; tables of in-sample classes are held out themselves
ELEVENTH_CASES = [
    Case("h800_8gpu_1node_broadcast_nf5688m7.txt", "dgx-h100", version=(2, 18, 3), machine={"links_per_gpu": 8},
         machine_class="h100-nvswitch-1host", held_out=True,
         why=f"{_H800} (an Inspur NF5688M7), one process (-g 8), NCCL 2.18.3, broadcast, -c 0, no NCCL variable shown"),
    Case("a100_16gpu_2node_all_reduce_aws_p4de_pcluster_efa.txt", "dgx-a100", 2, 4, 12.5, "efa", version=(2, 17),
         env={"NCCL_PROTO": "simple"}, machine={"cpu_vendor": "intel", "plugin_latency_us": 150.0},
         machine_class="a100-efa-multihost", held_out=True,
         why="2 x AWS p4de.24xlarge of an AWS ParallelCluster workshop: 8 x A100-SXM4-80GB (NVSwitch), \"found 4 nics\" "
             "EFA (100 Gb/s each and the Xeon 8275CL: AWS's instance documentation), NCCL 2.17.1, aws-ofi-nccl 1.5.0 "
             "(which reports 150 µs of latency to NCCL: aws/aws-ofi-nccl v1.5.0-aws src/nccl_ofi_net.c line 1654; 75 "
             "on p4d/p4de from v1.7.0), NCCL_PROTO=simple exported, -g 1"),
    Case("a100_8gpu_1node_all_reduce_dkh.txt", "dgx-a100", version=(2, 19, 3), machine_class="a100-nvswitch-1host",
         held_out=True,
         why="8 x A100-SXM4-80GB in one host (HGX A100 8-GPU: the `dgx-a100` preset's NVSwitch), one process (-g 8), "
             "NCCL 2.19.3 (nccl-tests 2.19.4's header), no NCCL variable shown"),
    *[Case(f"h100_8gpu_1node_{name}_simumax.txt", "dgx-h100", machine={"gpus_per_process": 8},
           machine_class="h100-nvswitch-1host", held_out=True,
           why="one node of 8 x H100 SXM (900 GB/s NVLink, NVSwitch: MooreThreads/SimuMax's nccl_fit.py), one process "
               "(-g 8, the repository's nccl_test.sh), bfloat16, 1 MiB - 8 GiB, NCCL version and environment not "
               "stated (defaults, 2.28 gates assumed)")
      for name in ("all_reduce", "all_gather", "reduce_scatter", "alltoall")],
]

_MI308X_SKIP = ("no preset or override describes the MI308X (gfx942 with 80 CUs where the `mi300x` preset is the 304-CU "
                "MI300X; its xGMI link rate is not stated) and the speed of the 8 Broadcom RoCE NICs per host is not stated")

#: the twelfth set: AMD Instinct tables from sources no earlier fixture uses (or another run of one, ``source_reused``),
#: described from their sources before any prediction; tables of in-sample classes are held out themselves
TWELFTH_CASES = [
    Case("mi300x_8gpu_1node_all_reduce_rocmblog_graph.txt", "mi300x", version=(2, 22, 3), machine_class="mi300x-1host",
         held_out=True, source_reused=True,
         why="8 x MI300X xGMI mesh, the host and RCCL 2.22.3 build of mi300x_8gpu_1node_all_reduce_rocmblog_rccl2.22.txt "
             "(AMD ROCm blog, March 2025), its second run: one process per GPU (-g 1) with graph launch (-G 1: no model "
             "term), no RCCL variable shown"),
    Case("mi308x_16gpu_2node_all_reduce_bnxt_roce.txt", "mi300x", 2, 8, None, "roce", version=(2, 27, 7),
         machine_class="amd-multihost",
         why="2 hosts x 8 AMD Instinct MI308X, 8 Broadcom bnxt_re RoCE NICs per host (speed not stated), RCCL 2.27.7, "
             "RCCL_MSCCL_ENABLE=0, -g 1", skip_reason=_MI308X_SKIP),
    Case("mi350x_8gpu_1node_all_reduce_mpi_np8.txt", "mi355x", version=(2, 26), machine_class="mi355x-1host",
         source_reused=True,
         why="the MI350X host of mi350x_8gpu_1node_all_reduce.txt (AMD node bring-up notes, ROCm 7.0 RCCL), its MPI run: 8 "
             "processes (-g 1), no RCCL variable shown",
         skip_reason="the run fails its own document's criterion (>= 304 GB/s in-place busbw at 8 GB: 289.27) and its busbw "
                     "falls from 347 GB/s at 256 MiB to 138 GB/s at 1 GiB, where the same host's single-process run holds "
                     "362 GB/s: it does not measure one behaviour"),
]

_GKE_DRA = ("2 of the 8 B200 (GPU 0 and 1, given to the pod by NVIDIA's DRA driver) of one GCP a4-highgpu-8g (the "
            "`hgx-b200` preset's NVLink 5 switch board), Google's gIB diagnostic image v1.0.6 (set_nccl_env.sh sourced, "
            "its variables not shown), NCCL 2.26.6, 2 processes of one GPU each; rows below 64 MiB elided by the post")

#: the thirteenth set: one-host NVLink / NVSwitch tables of collectives other than all_reduce, from sources no earlier
#: fixture uses (or, marked ``source_reused``, another run of a site an earlier fixture uses), described from their
#: sources before any prediction; tables of in-sample classes are held out themselves
THIRTEENTH_CASES = [
    Case("b200_2gpu_1node_all_gather_gke_dra.txt", "hgx-b200", version=(2, 26, 6), machine={"ranks": 2},
         machine_class="b200-nvswitch-1host", source_reused=True,
         why=f"{_GKE_DRA}; all_gather, 64 MiB - 8 GiB"),
]

_DSTACK = ("dstackai/dstack's cluster examples (MPL-2.0): dstack's own 2-node run on that cloud, 16 processes (-g 1), no "
           "device lines")

_DEEPOPS = "NVIDIA/deepops's documentation (BSD-3-Clause), no parameter or device lines"

#: the fourteenth set: NVIDIA multi-host tables from sources no earlier fixture uses (the cluster examples of
#: dstackai/dstack, one cloud each, and the validation pages of NVIDIA/deepops), described from their sources before
#: any prediction; tables of in-sample classes are held out themselves, the DGX-1 ones over InfiniBand and RoCE form
#: the new held-out classes v100-ib-multihost and v100-roce-multihost
FOURTEENTH_CASES = [
    Case("h100_16gpu_2node_all_gather_gcp_a3mega_dstack.txt", "dgx-h100", 2, 8, 25.0, "tcpxo", version=(2, 23),
         machine_class="h100-tcpxo-multihost", held_out=True,
         why=f"2 x GCP a3-megagpu-8g (8 x H100 SXM, 8 x 200 Gb/s GPUDirect-TCPXO NICs per host, as the first set's A3 "
             f"Mega case), {_DSTACK}; all_gather, 8 MiB - 8 GiB, -c 0, TCPXO's NCCL build and env profile (version "
             "not printed: the release then current, Feb 06 2025, ships NCCL 2.23)"),
    Case("b200_16gpu_2node_all_reduce_gcp_a4_dstack.txt", "hgx-b200", 2, 8, 50.0, "roce", version=(2, 26),
         machine_class="b200-roce-multihost",
         why=f"2 x GCP A4 (8 x B200, 8 x ConnectX-7 RoCE per host, 400 Gb/s each: Google's A4 documentation), "
             f"{_DSTACK}; NCCL defaults, no gIB plugin named, dstack's default image (NCCL 2.26.2 by its Dockerfile "
             "of that date; not printed), rows from 8 MiB"),
    Case("h100_16gpu_2node_all_reduce_nebius_ib_dstack.txt", "dgx-h100", 2, 8, 50.0, version=(2, 26),
         machine_class="h100-ib-multihost", held_out=True,
         why=f"2 Nebius H100 hosts (8 x H100 SXM; InfiniBand, 8 x 400 Gb/s NDR per host: Nebius's documentation, "
             f"not the page), {_DSTACK}; NCCL defaults, dstack's default image (NCCL 2.26.2 by its Dockerfile of "
             "that date; not printed)"),
    Case("b200_16gpu_2node_all_reduce_lambda_ib_dstack.txt", "hgx-b200", 2, 8, 50.0, version=(2, 26, 2),
         machine_class="b200-ib-multihost",
         why=f"2 Lambda B200 hosts (8 x B200; InfiniBand, 8 x 400 Gb/s NDR per node: Lambda's 1-Click Clusters "
             f"documentation, not the page), {_DSTACK}; NCCL 2.26.2 (printed), NCCL defaults (NVLS and tree as NCCL "
             "picks; NCCL_IB_HCA=^mlx5_0 only drops the host port), -c 1 -n 100"),
    Case("a100_16gpu_2node_all_reduce_crusoe_ib_dstack.txt", "dgx-a100", 2, 8, 25.0, version=(2, 26),
         machine_class="a100-ib-multihost",
         why=f"2 Crusoe A100 80GB SXM VMs (8 x A100 on NVSwitch; 8 InfiniBand HCAs per host in NCCL_IB_HCA, 200 Gb/s "
             f"HDR each: Crusoe's instance documentation, not the page), {_DSTACK}; dstack's default image's "
             "nccl-tests (NCCL 2.26.2 by its Dockerfile of that date; not printed); NCCL_TOPO_FILE of Crusoe's VM, "
             "NCCL_IB_QPS_PER_CONNECTION=2, NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL_IB_AR_THRESHOLD=0 and the socket "
             "threads have no model term"),
    Case("a100_32gpu_4node_all_reduce_deepops_slurm.txt", "dgx-a100", 4, 8, 25.0, version=(2, 7),
         machine_class="a100-ib-multihost",
         why=f"4 x DGX A100 over InfiniBand, 8 x ConnectX-6 per host (200 Gb/s HDR: the DGX A100 data sheet), "
             f"{_DEEPOPS}; DeepOps' Slurm validation (srun, pyxis), the TF 20.06 image (NCCL 2.7.5, not printed), 32 "
             "ranks by the rows' bus factor, 1 MiB - 4 GiB, no NCCL variable shown"),
    Case("a100_16gpu_2node_all_reduce_deepops_k8s_ib.txt", "dgx-a100", 2, 8, 25.0, env={"NCCL_ALGO": "RING"},
         machine_class="a100-ib-multihost",
         why=f"2 x DGX A100, 8 x 200 Gb/s HDR ConnectX-6 per host (stated) through the Network Operator's SR-IOV VFs, "
             f"{_DEEPOPS}; the page's MPIJob sets NCCL_ALGO=RING (its -np 32 is not this 16-rank run's), NCCL "
             "version not stated (2.28 gates assumed)"),
    Case("v100_16gpu_2node_all_reduce_deepops_k8s_ib.txt", "dgx1-v100", 2, 4, 12.5, machine_class="v100-ib-multihost",
         why=f"2 DGX-1 (8 x V100 SXM2 hybrid cube mesh) over InfiniBand, \"4 x 100G HCA interfaces\" (stated), "
             f"{_DEEPOPS}; 16 ranks by the rows' bus factor (2 hosts assumed), NCCL_NET_GDR_LEVEL=2 (no model term), "
             "NCCL version not stated (2.28 gates assumed)"),
    Case("v100_16gpu_2node_all_reduce_deepops_roce.txt", "dgx1-v100", 2, 2, 12.5, "roce", version=(2, 5, 6),
         release_source="header",
         machine_class="v100-roce-multihost",
         why=f"2 DGX-1 (8 x V100 SXM2 32GB) over RoCE, one SR-IOV VF of each of 2 ConnectX-5 100G per host, one "
             f"SN2700 switch (stated), NCCL 2.5.6 (stated), {_DEEPOPS}; NCCL_NET_GDR_LEVEL=2, no NCCL_ALGO shown "
             "(the page calls it a ring test)"),
]

_DN_LAB = ("AMD Instinct MI355X hosts amd-mi355x-5/-6 of Ahalperin/amd-dev's results (commit 58a032f): xGMI mesh (the "
           "`mi355x` preset), 8 x 400 Gb/s AMD Pensando ionic RoCE NICs per host, RCCL 2.26.6 (local build), one process "
           "per GPU (-g 1), NCCL_DEBUG=TRACE with every subsystem logged to a file (no model term), no tuning variable")

#: the fifteenth set: AMD Instinct tables from sources no earlier fixture uses (or, marked ``source_reused``, another run
#: of one), described from their sources before any prediction; tables of in-sample classes are held out themselves
FIFTEENTH_CASES = [
    Case("mi355x_8gpu_1node_all_reduce_dn_lab.txt", "mi355x", version=(2, 26, 6),
         release_source="header", machine_class="mi355x-1host",
         why=f"one host, 8 GPUs: {_DN_LAB}"),
    Case("mi355x_8gpu_1node_alltoall_dn_lab.txt", "mi355x", version=(2, 26, 6),
         release_source="header", machine_class="mi355x-1host",
         why=f"one host, 8 GPUs, alltoall: {_DN_LAB}; its time holds at 300-316 us from 128 B to 64 MiB (the same "
             "batch's 2- and 4-GPU alltoall: 15 and 97 us), which the repository does not comment"),
    Case("mi355x_16gpu_2node_all_reduce_ionic.txt", "mi355x", 2, 8, 50.0, "roce", version=(2, 26, 6),
         release_source="header",
         machine_class="amd-multihost", why=f"2 hosts x 8 GPUs: {_DN_LAB}"),
    Case("mi355x_2gpu_2node_all_reduce_ionic_1gpn.txt", "mi355x", 2, 1, 50.0, "roce", version=(2, 26, 6),
         release_source="header",
         machine={"ranks": 2}, machine_class="1gpu-per-host",
         why=f"2 hosts x 1 GPU (HIP_VISIBLE_DEVICES=0), one ionic NIC per host in use (its debug log): {_DN_LAB}"),
]

_EKS_P4D = ("2 x AWS p4d.24xlarge in an EKS node group (aws-samples/aws-efa-eks's README): 8 x A100-SXM4-40GB (the "
            "`dgx-a100` preset's NVSwitch), 4 EFA NICs per host with GPUDirect RDMA (\"4x100 Gbps EFA\"; the log's "
            "NET/AWS Libfabric/0..3/GDRDMA), Xeon 8275CL (AWS's instance documentation), Kubeflow MPIJob, -g 1")
_EKS_P3DN = ("AWS p3dn.24xlarge EKS nodes (aws-samples/eks-efa-examples): 8 x Tesla V100-SXM2-32GB (the `dgx1-v100` preset's "
             "hybrid cube mesh: AWS's instance documentation), one 100 Gb/s EFA per host (AWS's instance documentation; "
             "aws-ofi-nccl's \"Forcing AWS OFI ndev 4\", no GDRDMA), NCCL 2.6.4 (printed), -g 1")

#: the sixteenth set: V100 and A100 multi-host tables over AWS EFA from sources no earlier fixture uses (AWS's EKS EFA
#: samples, 2020-2021), described from their sources before any prediction; tables of in-sample classes are held out
#: themselves
SIXTEENTH_CASES = [
    Case("a100_16gpu_2node_all_reduce_aws_p4d_eks_efa_nccl2.8.txt", "dgx-a100", 2, 4, 12.5, "efa", version=(2, 8, 3),
         env={"NCCL_ALGO": "RING"}, machine={"cpu_vendor": "intel"}, machine_class="a100-efa-multihost", held_out=True,
         why=f"{_EKS_P4D}; NCCL 2.8.3 (printed), NCCL_ALGO=RING and FI_EFA_USE_DEVICE_RDMA=1 (the example job of the same "
             "commit, whose -e 1G -n 1000 the log header matches)"),
    Case("a100_16gpu_2node_all_reduce_aws_p4d_eks_efa_nccl2.9.txt", "dgx-a100", 2, 4, 12.5, "efa", version=(2, 9, 9),
         env={"NCCL_ALGO": "RING"}, machine={"cpu_vendor": "intel"}, machine_class="a100-efa-multihost", held_out=True,
         why=f"{_EKS_P4D}; NCCL 2.9.9 (printed), the README's later run (-e 4G, 100 iterations); NCCL_ALGO=RING assumed: "
             "the README's step 5 runs `kubectl create -f examples/nccl-efa-tests.yaml`, whose mpirun sets -x "
             "NCCL_ALGO=RING (examples/nccl-efa-tests.yaml @9933d7f, lines 47-48), and the log's orted line repeats "
             "that job's other mpirun options (-bind-to none, -map-by slot, --oversubscribe, --mca pml ^cm); "
             "the header's -e 4G -n 100 differ from the job's -e 1G -n 1000"),
    Case("v100_16gpu_2node_all_reduce_aws_p3dn_eks_efa.txt", "dgx1-v100", 2, 1, 12.5, "efa", version=(2, 6, 4),
         machine_class="v100-efa-multihost",
         why=f"2 {_EKS_P3DN}; 16 processes, its logs/mpi-nccl-test-log-16.log: command and NCCL variables not shown "
             "(defaults assumed)"),
    Case("v100_64gpu_8node_all_reduce_aws_p3dn_eks_efa.txt", "dgx1-v100", 8, 1, 12.5, "efa", version=(2, 6, 4),
         machine_class="v100-efa-multihost",
         why=f"8 {_EKS_P3DN}; 64 processes, its logs/mpi-nccl-test-log-64.log: command and NCCL variables not shown",
         skip_reason="the run does not measure one behaviour: its time holds at 2.18-2.28 ms from 8 B to 1 MiB (the "
                     "same set-up's 16-rank run: 0.15 ms) and it takes longer at 8 and 16 MiB (16.0 and 16.9 ms) than "
                     "at 32 MiB (12.9 ms)"),
    Case("v100_2gpu_2node_all_reduce_aws_p3dn_eks_efa_1gpn.txt", "dgx1-v100", 2, 1, 12.5, "efa", version=(2, 6, 4),
         env={"NCCL_ALGO": "ring"}, machine={"ranks": 2}, machine_class="1gpu-per-host",
         why=f"2 {_EKS_P3DN}; one process and GPU per host (the README's run of example-jobs/mpi-nccl-test.yaml: -n 2 "
             "-N 1, NCCL_ALGO=ring, FI_EFA_TX_MIN_CREDITS=64 and FI_EFA_ENABLE_SHM_TRANSFER=0: no model term)"),
]

_DRANET_2GPN = ("2 GKE nodes of machine type a4-highgpu-8g (8 x B200 each: the `hgx-b200` preset's NVLink 5 switch "
                "board), one pod per node holding 2 of its B200 (NVIDIA's DRA driver) and the 2 matching RDMA NICs "
                "(DraNet: gpu0rdma0, gpu1rdma0; RoCE, 400 Gb/s ConnectX-7 each by Google's A4 documentation, not the "
                "post), Google's gIB diagnostic image v1.0.6 (set_nccl_env.sh sourced, its variables not shown), NCCL "
                "2.26.6, 4 processes of one GPU each; rows below 256 MiB elided by the post")

#: the seventeenth set: NVIDIA (H100 / H200 / H800 / B200) tables of collectives other than all_reduce, from sources no
#: earlier fixture uses (or, marked ``source_reused``, another run of one), described from their sources before any
#: prediction; tables of in-sample classes are held out themselves
SEVENTEENTH_CASES = [
    Case("b200_4gpu_2node_all_gather_gke_dranet_2gpn.txt", "hgx-b200", 2, 2, 50.0, "roce", version=(2, 26, 6),
         machine={"ranks": 4}, machine_class="b200-roce-multihost", source_reused=True,
         why=f"{_DRANET_2GPN}; all_gather, 256 MiB - 8 GiB; the post's run after DraNet gave the pods their NICs "
             "(\"They now connect!\"); the post and its single-pod run are b200_2gpu_1node_all_gather_gke_dra.txt's"),
    Case("b200_2gpu_2node_all_gather_gke_dranet_1gpn.txt", "hgx-b200", 2, 2, 50.0, "roce", version=(2, 26, 6),
         machine={"ranks": 2}, machine_class="1gpu-per-host", source_reused=True,
         why="the other stored version of that post, its last run: 2 a4-highgpu-8g nodes, one pod each with a claim "
             "of 2 B200 and their 2 RDMA NICs on one PCIe root (DRA driver + DraNet; RoCE, 400 Gb/s ConnectX-7 each by "
             "Google's A4 documentation), but one process per pod on its GPU 0 (-g 1, 2 ranks), gIB diagnostic image "
             "v1.0.6 (set_nccl_env.sh sourced, variables not shown), NCCL 2.26.6; all_gather, 32 B - 1 GiB; whether "
             "NCCL drives one or both NICs from the one GPU is not shown"),
    Case("h200_2gpu_2node_all_gather_gke_dranet_1gpn.txt", "hgx-h200", 2, 1, 50.0, "roce", version=(2, 25, 1),
         machine={"ranks": 2}, machine_class="1gpu-per-host", source_reused=True,
         why="the DraNet project's \"GKE RDMA Demo\" (another document of the project of the DraNet posts): 2 A3 Ultra "
             "nodes (8 x H200, the `hgx-h200` preset; 8 ConnectX-7 RoCE NICs, 400 Gb/s each by Google's A3 Ultra "
             "documentation), one pod each with 1 H200 and 1 RDMA NIC (DraNet), one process per pod (-g 1, 2 ranks), "
             "Google's gIB plugin, NCCL 2.25.1; all_gather, 1 KiB - 8 GiB"),
]

#: the eighteenth set: NVIDIA tables from sources no earlier fixture uses (an nccl-tests how-to page, a training
#: framework's test data), described from their sources before any prediction; tables of in-sample classes are held
#: out themselves
EIGHTEENTH_CASES = [
    Case("h100_16gpu_2node_all_reduce_dgx_ib_howto.txt", "dgx-h100", 2, 8, 50.0, "ib", machine_class="h100-ib-multihost",
         held_out=True,
         why="an nccl-tests how-to page (file id 15057250191): 2 hosts x 8 H100 80GB HBM3 at the DGX H100 bus IDs, "
             "16 processes (-g 1), NCCL_IB_HCA naming 8 HCAs per host (speed and link layer not stated: 8 x 400 Gb/s "
             "InfiniBand assumed, a DGX H100's), NCCL version not printed (2.28 gates assumed), NCCL defaults; "
             "256 MiB - 8 GiB"),
    Case("a100_8gpu_1node_all_reduce_galvatron_test.txt", "dgx-a100", machine_class="a100-nvswitch-1host",
         held_out=True,
         why="AFDWang/Hetu-Galvatron's hardware-profiler test data: one host, 8 x A100-SXM4-40GB at the DGX A100 bus "
             "IDs (NVSwitch), one process (-g 8), NCCL version and variables not shown (2.28 gates and defaults "
             "assumed); 1 MiB - 1 GiB"),
]

_DN_LAB_PART = ("another run of the Ahalperin/amd-dev batch (commit 58a032f) of the fifteenth set's dn_lab / ionic tables "
                "(source reused): AMD Instinct MI355X hosts amd-mi355x-5/-6, xGMI mesh (the `mi355x` preset), 8 x 400 Gb/s "
                "AMD Pensando ionic RoCE NICs per host, RCCL 2.26.6 (local build; the batch's debug log, not this run's: "
                "the Case keeps a bare 2.26), one process per GPU (-g 1), HIP_VISIBLE_DEVICES picks the GPUs, NCCL_DEBUG=TRACE to a file (no model term), no tuning variable")

#: the nineteenth set: AMD Instinct tables of fewer GPUs per host than 8 and of alltoall across hosts, described from their
#: sources before any prediction; every table is of a class of the fixed held-out split
NINETEENTH_CASES = [
    Case("mi355x_8gpu_2node_all_reduce_ionic_4gpn.txt", "mi355x", 2, 4, 50.0, "roce", version=(2, 26),
         machine={"ranks": 8}, machine_class="amd-multihost", source_reused=True,
         why=f"2 hosts x 4 GPUs (GPUs 0-3), four ionic NICs per host in use (its debug log: NET/IB/0-3): {_DN_LAB_PART}"),
    Case("mi355x_8gpu_2node_alltoall_ionic_4gpn.txt", "mi355x", 2, 8, 50.0, "roce", version=(2, 26),
         machine={"ranks": 8}, machine_class="amd-multihost", source_reused=True,
         why=f"2 hosts x 4 GPUs (GPUs 0-3), alltoall; the NICs it used are not logged (no debug log in its directory; "
             f"the host has 8, the model uses at most one per GPU): {_DN_LAB_PART}"),
    Case("mi355x_4gpu_2node_all_reduce_ionic_2gpn.txt", "mi355x", 2, 1, 50.0, "roce", version=(2, 26),
         machine={"ranks": 4}, machine_class="amd-multihost", source_reused=True,
         why=f"2 hosts x 2 GPUs (GPUs 0 and 1), one ionic NIC per host in use (its debug log: every inter-host channel "
             f"via NET/IB/0): {_DN_LAB_PART}"),
    Case("mi355x_4gpu_2node_alltoall_ionic_2gpn.txt", "mi355x", 2, 2, 50.0, "roce", version=(2, 26),
         machine={"ranks": 4}, machine_class="amd-multihost", source_reused=True,
         why=f"2 hosts x 2 GPUs (GPUs 0 and 1), alltoall, two ionic NICs per host in use (its debug log: NET/IB/0 and "
             f"NET/IB/1): {_DN_LAB_PART}"),
    Case("mi355x_2gpu_2node_alltoall_ionic_1gpn.txt", "mi355x", 2, 1, 50.0, "roce", version=(2, 26),
         machine={"ranks": 2}, machine_class="1gpu-per-host", source_reused=True,
         why=f"2 hosts x 1 GPU (GPU 0), alltoall, one ionic NIC per host (its debug log: NET/IB/0): {_DN_LAB_PART}"),
    Case("mi355x_4gpu_1node_all_reduce_dn_lab.txt", "mi355x", version=(2, 26), machine={"ranks": 4},
         machine_class="mi355x-1host", source_reused=True,
         why=f"one host, GPUs 0-3 of its xGMI mesh (every channel via P2P/IPC): {_DN_LAB_PART}"),
    Case("mi355x_4gpu_1node_alltoall_dn_lab.txt", "mi355x", version=(2, 26), machine={"ranks": 4},
         machine_class="mi355x-1host", source_reused=True,
         why=f"one host, GPUs 0-3 of its xGMI mesh, alltoall (every connection via P2P/IPC): {_DN_LAB_PART}"),
]

#: the twentieth set: single-host MI355X tables (2 GPUs of the nineteenth set's batch; 8 GPUs of two other runs of the
#: same repository, all_gather among them: source reused) and an A100-over-InfiniBand table of Azure VMs from a source
#: no earlier fixture uses, each described from its source before any prediction; every table is of a class of the
#: fixed held-out split
TWENTIETH_CASES = [
    Case("mi355x_2gpu_1node_all_reduce_dn_lab.txt", "mi355x", version=(2, 26), machine={"ranks": 2},
         machine_class="mi355x-1host", source_reused=True,
         why=f"one host, GPUs 0 and 1 of its xGMI mesh (every connection via P2P/IPC): {_DN_LAB_PART}"),
    Case("mi355x_2gpu_1node_alltoall_dn_lab.txt", "mi355x", version=(2, 26), machine={"ranks": 2},
         machine_class="mi355x-1host", source_reused=True,
         why=f"one host, GPUs 0 and 1 of its xGMI mesh, alltoall (every connection via P2P/IPC): {_DN_LAB_PART}"),
    Case("a100_16gpu_2node_all_reduce_aks_ndv4_sriov.txt", "dgx-a100", 2, 8, 25.0, "ib", version=(2, 25),
         machine_class="a100-ib-multihost",
         why="2 Azure Standard_ND96asr_v4 VMs in an AKS node pool (Azure/aks-rdma-infiniband's tests README; 8 x "
             "A100 40GB SXM4 on NVSwitch and 8 x 200 Gb/s HDR InfiniBand per VM, the NICs given to the pods as SR-IOV "
             "VFs by the Network Operator), the expected output of its sriov-nic-policy-gpu MPIJob (2 workers x 8 "
             "slots; 16 ranks by the rows' bus factor); NCCL of the image's nvidia/cuda:12.8.1-devel base (2.25, not "
             "printed); NCCL_TOPO_FILE (Azure's ndv4 topology), NCCL_NET_GDR_LEVEL=SYS and NCCL_IB_DISABLE=0 have no "
             "model term; -c 0 -f 4 -n 10, 8 B - 8 GiB"),
    Case("mi355x_8gpu_1node_all_gather_dn_container.txt", "mi355x", version=(2, 26, 6),
         release_source="header", machine_class="mi355x-1host",
         source_reused=True,
         why="Ahalperin/amd-dev's tools/rccl-log-samples all_gather log (another day and build than its scale_* batch): "
             "8 gfx950 GPUs at the bus IDs of the lab's MI355X hosts (names blank in the container's device lines; an "
             "MI350X / MI355X host either way: the `mi355x` preset's xGMI mesh), ROCm 7.0.2's RCCL 2.26.6, one process "
             "(-g 8, P2P/direct), NCCL_DEBUG=INFO only; all_gather, 4 B - 8 GiB"),
    Case("mi355x_8gpu_1node_all_reduce_ses2_g8.txt", "mi355x", version=(2, 26, 6),
         release_source="header", machine_class="mi355x-1host",
         source_reused=True,
         why="Ahalperin/amd-dev's tools/rccl-log-samples all_reduce log of host amd-mi355x-ses2-1 (not the scale_* "
             "batch's host): 8 gfx950 GPUs (names blank in the device lines) on xGMI (XGMI[48.0] in its GRAPH lines), "
             "the repository's RCCL 2.26.6 build, ROCm 7.0.2, one process (-g 8), NCCL_DEBUG=INFO, "
             "NCCL_DEBUG_SUBSYS=GRAPH, no tuning variable; 64 KiB - 4 GiB"),
    Case("mi355x_6gpu_1node_all_gather_dn_container.txt", "mi355x", version=(2, 26), machine={"ranks": 6},
         machine_class="mi355x-1host", source_reused=True,
         why="Ahalperin/amd-dev's tools/rccl-log-samples 6-GPU log (an all_gather despite its name), the same day's "
             "rccl-builder container as mi355x_8gpu_1node_all_gather_dn_container.txt: 6 of a host's 8 gfx950 GPUs (bus "
             "IDs of the lab's MI355X; names blank), one process (-g 6), RCCL version not printed (2.26: the same day's "
             "8-GPU run prints ROCm 7.0.2's 2.26.6), no variable shown; all_gather, 4 B - 128 MiB"),
]

_ABCI_SHARP = ("2 ABCI 'Compute Node (A)' hosts of the ABCI User Guide's SHARP chapter (aistabci/abci-docs, commit "
               "a46fee3, 2022): 8 x A100-SXM4-40GB each (the `dgx-a100` preset's NVSwitch board), 4 x InfiniBand HDR "
               "200 Gb/s per host (the same repository's system overview), SHARP in-network reduction through the "
               "NCCL-SHARP plugin with NCCL_COLLNET_ENABLE=1 (the log's SHARP tree lines: `collnet`), NCCL 2.8 (module "
               "nccl/2.8; the release is not printed), one process per GPU (-g 1), -w 50 -n 50, 8 B - 2 GiB")

_NIG_V100 = ("2 NIG supercomputer 'Thin compute node Type 2b' hosts igt002/igt007 (nig-sc/nigsc_homepage2's user guide: "
             "HPE Apollo 6500 Gen10, 4 x V100 SXM2 and 1 x InfiniBand 4xEDR 100 Gb/s per node; the board's NVLink wiring is "
             "not stated: the `dgx1-v100` preset's first 2 GPUs stand in), 2 GPUs per host from one process each (-g 2), "
             "4 ranks, alltoall 2 B - 128 MiB; NCCL of NVIDIA HPC SDK 23.7 (not printed: 2.18 assumed, that SDK's "
             "release), no NCCL variable")

_AZCLUSTER = ("2 Azure Standard_ND96isr_H100_v5 VMs (edwardsp/azcluster's v0.13.4 walkthrough, 2026-05-22): 8 x H100 "
              "80GB HBM3 on the VM's NVSwitch board (the `dgx-h100` preset) and 8 x NDR 400 Gb/s InfiniBand each (stated), "
              "NCCL 2.29.7 (its nccl-library line) with HPC-X 2.25.1's net plugin, 16 processes (-g 1), 8 MiB - 16 GiB; "
              "NCCL_IB_HCA / NCCL_TOPO_FILE set (no model term), no NCCL_COLLNET_ENABLE shown (NCCL's default, off)")

#: the twenty-first set: NVIDIA tables of sources no earlier fixture uses: an H100-over-InfiniBand all_reduce of two
#: Azure VMs (its class is in-sample, so it is held out itself), an A100-over-InfiniBand all_reduce of two hosts with
#: SHARP and a V100-over-InfiniBand alltoall of two hosts (classes of the fixed held-out split), each described from
#: its source before any prediction.  Not taken: microsoft/superbenchmark's six one-host A100 tables (tests/data/
#: nccl_*.log), a parser's unit-test fixtures with one INFO line pasted across runs of different processes, judged
#: unusable by an earlier set and again here
TWENTY_FIRST_CASES = [
    Case("a100_16gpu_2node_all_reduce_abci_sharp.txt", "dgx-a100", 2, 4, 25.0, "ib",
         env={"NCCL_COLLNET_ENABLE": "1"}, version=(2, 8), machine={"collnet": True, "cpu_vendor": "intel"},
         machine_class="a100-ib-multihost", why=_ABCI_SHARP),
    Case("v100_4gpu_2node_alltoall_nig_edr_2gpn.txt", "dgx1-v100", 2, 1, 12.5, "ib", version=(2, 18),
         machine={"ranks": 4}, machine_class="v100-ib-multihost", why=_NIG_V100),
    Case("h100_16gpu_2node_all_reduce_azure_ndv5_azcluster.txt", "dgx-h100", 2, 8, 50.0, "ib", version=(2, 29, 7),
         machine_class="h100-ib-multihost", held_out=True, why=_AZCLUSTER),
]

_A3M_GKE = ("2 x GCP a3-megagpu-8g in one GKE node pool (a personal setup script, code-index file id 20165389341): 8 x H100 "
            "80GB SXM on NVSwitch and 8 additional node networks for GPUDirect-TCPXO (8 x 200 Gb/s, as the first set's A3 "
            "Mega case), GKE 1.29.4, container-engine-accelerators' nccl-tcpxo-installer and nccl-test.yaml, its "
            "allgather.sh over the 2 hosts (16 ranks: busbw / algbw = 15/16); NCCL version and env profile not printed "
            "(GKE 1.29.4 dates it to 2024, whose TCPXO releases ship NCCL 2.21.5); all_gather 0 B - 8 GiB")

_A3M_SLURM = ("2 x GCP a3-megagpu-8g Slurm nodes of Cluster Toolkit v1.39.0 (a Japanese Slurm + DDN EXAScaler guide, code-index "
              "file id 48078477915): 8 x H100 80GB SXM each, GPUDirect-TCPXO over 8 data NICs (NCCL_FASTRAK_IFNAME lists 8; "
              "8 x 200 Gb/s as the earlier A3 Mega cases), the toolkit's run-nccl-tests.sh (-N 2, 8 tasks per node, -g 1, "
              "pytorch:24.04 container, the TCPXO NCCL build and its nccl-env-profile.sh); NCCL version not printed (toolkit "
              "v1.39.0, 2024-09-12: that year's TCPXO releases ship NCCL 2.21.5); all_gather 8 MiB - 8 GiB")

_FARMSHARE = ("Stanford FarmShare GPU node of yumibyte/CS244C-Research: NVIDIA L40S on PCIe (the `l40s-8gpu-pcie` "
              "preset's GPU), no NVLink; the repository's `nvidia-smi topo -m`: every GPU pair NODE (no PIX/PXB, no SYS: one "
              "CPU socket), CPU not stated (the preset's Intel default, whose NCCL P2P level PXB excludes NODE pairs: no P2P, "
              "SHM); NCCL 2.29.2, one process (-g {n}), no NCCL variable; all_reduce 8 B - 128 MiB")

#: the twenty-second set: two more 2-host H100 GPUDirect-TCPXO (A3 Mega) all_gather tables, each the run of a user's own
#: cluster (a GKE setup script's pasted output, a Slurm guide's expected output), from indexed files no earlier fixture
#: names (the class h100-tcpxo-multihost is in-sample, so each table is held out itself); and two one-host L40S
#: all_reduce tables (4 GPUs on oat-02, 2 GPUs on oat-05) of a course project's Stanford FarmShare runs, of the held-out
#: class pcie-1host; and the same project's one-host 8 x A100 all_reduce of a Modal cloud container (its class is in-sample,
#: so it is held out itself).  Each described from its source before any prediction
TWENTY_SECOND_CASES = [
    Case("h100_16gpu_2node_all_gather_gcp_a3mega_gke_tcpxo.txt", "dgx-h100", 2, 8, 25.0, "tcpxo", version=(2, 21),
         machine_class="h100-tcpxo-multihost", held_out=True, why=_A3M_GKE),
    Case("h100_16gpu_2node_all_gather_gcp_a3mega_slurm_lustre.txt", "dgx-h100", 2, 8, 25.0, "tcpxo", version=(2, 21),
         machine_class="h100-tcpxo-multihost", held_out=True, why=_A3M_SLURM),
    Case("l40s_4gpu_1node_all_reduce_farmshare.txt", "l40s-8gpu-pcie", version=(2, 29, 2),
         machine={"ranks": 4, "sockets": 1, "p2p": False}, machine_class="pcie-1host",
         why="4 x L40S on oat-02 (GPU0-1 on NUMA node 0, GPU2-3 on NUMA node 1), " + _FARMSHARE.format(n=4)),
    Case("l40s_2gpu_1node_all_reduce_farmshare.txt", "l40s-8gpu-pcie", version=(2, 29, 2),
         machine={"ranks": 2, "sockets": 1, "p2p": False}, machine_class="pcie-1host",
         why="2 x L40S on oat-05 (both on NUMA node 1), " + _FARMSHARE.format(n=2)),
    Case("a100_8gpu_1node_all_reduce_modal.txt", "dgx-a100", version=(2, 29, 3), machine_class="a100-nvswitch-1host",
         held_out=True,
         why="one Modal cloud container of yumibyte/CS244C-Research (gpu=\"A100:8\"): 8 x A100-SXM4-40GB (an 8-GPU SXM4 "
             "board: the HGX A100 NVSwitch board of the `dgx-a100` preset; NVSwitch not stated by the repository), NCCL "
             "2.29.3 from NVIDIA's apt repository, one process (-g 8), no NCCL variable; all_reduce 8 B - 128 MiB"),
]

_VP4 = ("4 bare-metal Voltage Park hosts g138/g205/g244/g150 (ZiyanIshani/vpbenchmarking, AI @ Georgia Tech, 2026-02-24/25): "
        "8 x H100 80GB HBM3 SXM5 each (the `dgx-h100` preset's 8-GPU NVSwitch board), \"3.2 Tbps InfiniBand\" per node "
        "(README: 8 x 400 Gb/s taken; the run agent's summary adds \"3 active ports per node\", not taken), NCCL 2.24.3 "
        "(Ubuntu libnccl2), OpenMPI 4.1.2, 32 processes (-g 1), NCCL_IB_DISABLE=0 and NCCL_SOCKET_IFNAME only (no model "
        "term); {coll} 8 B - 8 GiB")

_WAYNE = ("4 of the 8 H100 80GB SXM5 of one shared NVSwitch host (waynehacking8/nccl-collectives-bench's quiet-box re-run: "
          "every pair NV18, host GPUs 2-5 in a Docker NGC container, only a production single-GPU service left on GPU 0), "
          "NCCL 2.29.2 (nccl-library=22902), one process (-g 4), no NCCL variable; {coll} 8 B - 8 GiB")

_N013 = ("hosts n013 and n014 of thomaslie210/NCCL_Test_Results, one A100-PCIE-40GB each (the `l40s-8gpu-pcie` preset's "
         "PCIe GPU slot with the log's sm80; NVLink none), one process per host (2 ranks), one 200 Gb/s InfiniBand NIC "
         "per host (NCCL's NET[25.0], mlx5_2) on PCIe Gen4 beside the GPU under the same AMD CPU (path PHB), GPUDirect "
         "RDMA on (NCCL_NET_GDR_LEVEL=SYS), NCCL 2.16.5; {coll} 1 MiB - 1 GiB in 10 MiB steps")

#: the twenty-third set: a new source, a Voltage Park H100 cluster's nccl-tests logs (ZiyanIshani/vpbenchmarking): four
#: 4-host InfiniBand tables (all_reduce, all_gather, broadcast, reduce) and the one-host all_reduce of one of its hosts;
#: and a second new source, the quiet-box all_gather, reduce_scatter and all_reduce of a 4-GPU slice of a shared 8 x H100
#: NVSwitch host (waynehacking8/nccl-collectives-bench), those classes in-sample, so each table held out itself; and a
#: third new source, two 2-host one-GPU-per-host A100 PCIe tables over InfiniBand with GPUDirect RDMA
#: (thomaslie210/NCCL_Test_Results; the held-out class 1gpu-per-host).
#: Not taken: vpbenchmarking's one-host all_gather and broadcast tables (a disturbed run: times jump 10-100x between
#: neighbouring sizes).  Each described from its source before any prediction
TWENTY_THIRD_CASES = [
    *[Case(f"h100_32gpu_4node_{coll}_ib_voltagepark.txt", "dgx-h100", 4, 8, 50.0, version=(2, 24, 3),
           machine_class="h100-ib-multihost", held_out=True, why=_VP4.format(coll=coll))
      for coll in ("all_reduce", "all_gather", "broadcast", "reduce")],
    Case("h100_8gpu_1node_all_reduce_voltagepark.txt", "dgx-h100", version=(2, 24, 3),
         machine_class="h100-nvswitch-1host",
         held_out=True,
         why="host g138 of the same Voltage Park cluster: 8 x H100 80GB HBM3 SXM5 (the `dgx-h100` preset's board), NCCL "
             "2.24.3, one process (-g 8), no NCCL variable shown; all_reduce 8 B - 8 GiB"),
    *[Case(f"h100_4gpu_1node_{coll}_collectives_bench.txt", "dgx-h100", version=(2, 29, 2), machine={"ranks": 4},
           machine_class="h100-nvswitch-1host", held_out=True, why=_WAYNE.format(coll=coll))
      for coll in ("all_gather", "reduce_scatter", "all_reduce")],
    *[Case(f"a100pcie_2gpu_2node_{coll}_ib_gdr_1gpn.txt", "l40s-8gpu-pcie", 2, 1, 25.0, "ib", version=(2, 16, 5),
           machine={"ranks": 2, "pcie_gen": 4, "cpu_vendor": "amd", "nic_path": "PHB"}, machine_class="1gpu-per-host",
           why=_N013.format(coll=coll))
      for coll in ("all_gather", "all_reduce")],
]

_AICR = ("AICR host b0027 of mghpcc/aicr-benchmarks (MGHPCC's AICR B200 cluster, Benchmark_WG/nccl-tests, run"
         " of 2026-05-06): 8 x NVIDIA B200 on NVLink 5 / NVSwitch (the `hgx-b200` preset's board), AMD Turin "
         "host (stated), iommu=off / ACS off (stated), NVHPC 26.3's NCCL 2.29.3 (nccl-library=22903), "
         "nccl-tests 2.18.3, one process (-g 8), every NCCL variable commented out (NCCL defaults, NVLS on); "
         "{coll}, 1 MiB - 16 GiB in 4x steps")
_AICR2 = ("AICR hosts b0029 + b0030 of mghpcc/aicr-benchmarks (run of 2026-05-06): 8 x NVIDIA B200 each (the "
          "`hgx-b200` preset's board), 8 x NDR 400 Gb/s ConnectX-7 InfiniBand rails per host, each GPU PIX to"
          " its NIC behind a Broadcom PEX890xx switch, AMD Turin host (stated); the repository's own "
          "measurement of this pair (diag-aicr-gdrdma.md: ib_write_bw GPU<->GPU 47.5 GB/s one way, 27.2 GB/s "
          "per direction bidirectional, a GPU-endpoint defect it names) taken as the NICs' GPU-memory rate, "
          "nic_dma_gbs 27.2; NCCL 2.29.3 of NVHPC 26.3 with HPC-X's SHARP plugin loaded but "
          "NCCL_COLLNET_ENABLE commented out (defaults: CollNet off), one process per host (-g 8); {coll}, 1 "
          "MiB - 16 GiB in 4x steps{extra}")
_AICR2_FAULT = ("the repository diagnoses this host pair as faulty (diag-aicr-gdrdma.md: a GPU-endpoint defect, GPU-to-GPU "
                "RDMA at 27.2 GB/s per direction when both directions run against 47.3 host-to-host, '~1.75x on every "
                "bidirectional inter-node collective'), and the run's all_reduce sits on a 1.3-1.4 ms floor from 4 to 16 "
                "MiB: a fault of these hosts, not NCCL's behaviour on the machine described (as the degraded "
                "NVIDIA/nccl-tests#290 run)")
_AICR_SWEEP = ("{n} of the 8 B200 (the first {n} devices, -g {n}; the `hgx-b200` preset's NVSwitch board) of "
               "AICR host b0012, the same repository's GPU-count sweep (job 33169, 2026-06-03: another host "
               "and run than b0027's suite, so not independent evidence), AMD Turin host (stated), NCCL "
               "2.29.3 of NVHPC 26.3, nccl-tests 2.18.3, one process, no NCCL variable stated (defaults); "
               "{coll}, 1 MiB - 16 GiB in 4x steps")

#: the twenty-fourth set: a new source, the AICR B200 cluster's nccl-tests suite (mghpcc/aicr-benchmarks): the seven
#: collectives of one 8 x B200 NVSwitch host (sendrecv, reduce, broadcast, reduce_scatter, all_gather, all_reduce,
#: alltoall; the held-out class b200-nvswitch-1host), six 2- and 4-GPU tables of the same repository's GPU-count
#: sweep on another host (marked ``source_reused``), and five of a 2-host InfiniBand run (the held-out class
#: b200-ib-multihost) of a host pair the repository itself diagnoses as faulty (listed, not predicted).
#: Not taken: the suite's gather, scatter and hypercube tests (no model of them; hypercube fails validation), and the
#: 2-host broadcast and reduce tables (a disturbed run: 1-64 MiB rows jump up to 10x between neighbouring sizes and
#: between out-of-place and in-place).  Each described from its source before any prediction
TWENTY_FOURTH_CASES = [
    *[Case(f"b200_8gpu_1node_{name}_aicr_mghpcc.txt", "hgx-b200", version=(2, 29, 3), machine={"cpu_vendor": "amd"},
           machine_class="b200-nvswitch-1host", why=_AICR.format(coll=name))
      for name in ("sendrecv", "reduce", "broadcast", "reduce_scatter", "all_gather", "all_reduce", "alltoall")],
    *[Case(f"b200_16gpu_2node_{name}_aicr_gdr_defect.txt", "hgx-b200", 2, 8, 50.0, "ib", version=(2, 29, 3),
           machine={"cpu_vendor": "amd", "nic_dma_gbs": 27.2}, machine_class="b200-ib-multihost",
           why=_AICR2.format(coll=name, extra=extra), skip_reason=_AICR2_FAULT)
      for name, extra in (("sendrecv", ""), ("alltoall", ""),
                          ("reduce_scatter", "; its 1 and 4 MiB rows disturbed (0.8-1 ms, in-place 3x faster)"),
                          ("all_gather", "; its 1 and 4 MiB rows disturbed (0.7-3.7 ms, slower than 16 MiB)"),
                          ("all_reduce", "; its 1 MiB row disturbed (out-of-place 604 us, in-place 216 us)"))],
    *[Case(f"b200_{n}gpu_1node_{name}_aicr_sweep_b0012.txt", "hgx-b200", version=(2, 29, 3),
           machine={"ranks": n, "cpu_vendor": "amd"}, machine_class="b200-nvswitch-1host", source_reused=True,
           why=_AICR_SWEEP.format(n=n, coll=name))
      for n, name in ((4, "reduce_scatter"), (4, "all_gather"), (4, "all_reduce"), (4, "alltoall"),
                      (2, "all_gather"), (2, "all_reduce"))],
]

_OCI_GB300 = ("OCI BM.GPU.GB300.4 hosts of one NVL72 rack (oci-ai-incubations/oci-gpu-quickstarts' GB300 README, commit 61eba7f, "
              "2026-02-24; UPL-1.0): 4 GB300 per host, 2 Grace CPUs, the rack's NVLink 5 domain across hosts "
              "(NCCL_MNNVL_ENABLE=1), so the `gb200-nvl72` preset's one NVLink domain with the run's {n} ranks (its GPUs are "
              "B200: the GB300's NVLink 5 is the same 18 x 50 GB/s, the B300 die and sm103 are not modelled; the log's "
              "\"NVIDIA GB300\" read as sm100), NCCL 2.28.7 (its line), one process per GPU, "
              "NVLS and MNNVLS on, NCCL_BUFFSIZE=16777216 and NCCL_IB_QPS_PER_CONNECTION=4 set (no model term); {coll}, "
              "512 KiB - 16 GiB")

#: the twenty-fifth set: a new source, Oracle's OCI GPU Quick Starts GB300 README (oci-ai-incubations/oci-gpu-quickstarts,
#: the full tables of its February 2026 commits): all_reduce and alltoall of one GB300 host (4 GPUs), of 2 hosts and of
#: 16 hosts of one NVL72 rack, every rank in the rack's multi-node NVLink domain.  The 4- and 8-rank tables are of the
#: held-out class b200-nvswitch-1host (one NVSwitch domain of 8 GPUs or fewer, as the class function reads them); the
#: 64-rank tables of the new held-out class b200-nvl72 (no earlier log has a rack's NVLink domain).  Not taken: the README's 32-host, 2-rack tables (two NVLink domains of 64
#: ranks joined by RoCE: no machine of the project is shaped so; its alltoall runs at 47 GB/s busbw and its all_reduce
#: sits on a ~490 us floor from 512 KiB to 16 MiB).  Each described from its source before any prediction
TWENTY_FIFTH_CASES = [
    *[Case(f"gb300_{n}gpu_{h}node_{coll}_oci_nvl72.txt", "gb200-nvl72", version=(2, 28, 7),
           env={"NCCL_NVLS_ENABLE": "1"}, machine={"ranks": n},
           machine_class="b200-nvl72" if n > 8 else "b200-nvswitch-1host",
           why=(f"{h} host{'s' if h > 1 else ''}: " if h > 1 else "one host: ") + _OCI_GB300.format(n=n, coll=coll))
      for n, h in ((4, 1), (8, 2), (64, 16)) for coll in ("all_reduce", "alltoall")],
]

#: the 4-GPU HGX H100 board: every GPU's 18 NVLink 4 links split 6/6/6 over its 3 peers, no NVSwitch (assumed: the
#: Snellius logs show NVLink rates and no NVLS, not the wiring)
_H100_4MESH = {"intra": "nvlink", "links_per_gpu": 18, "nvls_switch": False,
               "link_matrix": ((0, 6, 6, 6), (6, 0, 6, 6), (6, 6, 0, 6), (6, 6, 6, 0))}
_SNELLIUS = ("SURF Snellius gpu_h100 hosts of odissei-benchmarks/nccl-tests (runs of 2025-08-04): 4 x \"NVIDIA H100\" per host, "
             "no NVSwitch (NCCL: \"NVLS multicast support is not available\"), the 4 GPUs joined by NVLink (P2P/direct and CUMEM "
             "channels, 324 GB/s all_reduce busbw on one host; the HGX H100 4-GPU board's 6 links per pair assumed: not stated), "
             "NCCL 2.22.3 (its line), NCCL_SOCKET_IFNAME only; CPU not stated (the preset's Intel default)")

#: the twenty-sixth set: a new source, the nccl-tests logs of an H100 benchmark of SURF's Snellius (odissei-benchmarks/
#: nccl-tests): all_reduce, all_gather and reduce_scatter of one 4 x H100 NVLink host (no NVSwitch: the new held-out class
#: h100-nvlink-1host) and of 2 such hosts over 4 x 200 Gb/s InfiniBand each (the in-sample class h100-ib-multihost, so
#: each table held out itself).  Not taken: the repository's stress-test logs (one 1-GPU run; a second 2-host
#: all_reduce with -n 100, the same hosts and day).  Each described from its source before any prediction
TWENTY_SIXTH_CASES = [
    *[Case(f"h100_4gpu_1node_{coll}_snellius_nvlink.txt", "dgx-h100", version=(2, 22, 3),
           machine={"ranks": 4, **_H100_4MESH}, machine_class="h100-nvlink-1host",
           why=f"one host (gcn155), one process driving its 4 GPUs (-g 4): {_SNELLIUS}; {coll}, 4 B - 128 MiB")
      for coll in ("all_reduce", "all_gather", "reduce_scatter")],
    *[Case(f"h100_8gpu_2node_{coll}_snellius_ib_4gpn.txt", "dgx-h100", 2, 4, 25.0, "ib", version=(2, 22, 3),
           machine={"ranks": 8, **_H100_4MESH}, machine_class="h100-ib-multihost", held_out=True,
           why=f"2 hosts (gcn151, gcn154) x 4 GPUs, 8 processes (-g 1), 4 x 200 Gb/s InfiniBand per host (ibstat: Rate 200; "
               f"NCCL's channels on IB/1-4, GDRDMA): {_SNELLIUS}; {coll}, 8 B - 8 GiB")
      for coll in ("all_reduce", "all_gather", "reduce_scatter")],
]

_AUTODL_2080TI = ("one AutoDL cloud container of Anthony-Hoo's blog post (2025-06-05): 2 x GeForce RTX 2080 Ti (Turing, "
                  "compute capability 7.5, PCIe Gen3 x16 by nvtop) under one PCIe switch (topo -m: PIX), both on NUMA node "
                  "1 of a 2-NUMA host (the pair's path crosses no socket link: `sockets` 1), CPU model not stated (the "
                  "preset's Intel default); P2P not supported (topo -p2p: NS; p2pBandwidthLatencyTest: CANNOT access "
                  "peer), so NCCL's SHM transport; Turing is read as `sm70`: NCCL's tuning tables put every compute "
                  "capability below 8.0 in the Volta row (tuning.cc compCapIndex), and the model has no sm75 (assumed); "
                  "NCCL version not printed (unknown: the Case default, 2.28 gates, assumed), no NCCL variable; one "
                  "process, -g 2, {coll} 8 B - 1 GiB")

#: the twenty-seventh set: a new source, a blog post's nccl-tests runs on 2 x RTX 2080 Ti of one AutoDL container
#: (github repo Anthony-Hoo/Anthony-Hoo.github.io): all_reduce, all_gather, broadcast, reduce and alltoall through host
#: memory (no P2P), the held-out class pcie-1host.  Not taken: the post's one-GPU reduce_perf run (one rank: nothing
#: crosses a link).  Each described from its source before any prediction
TWENTY_SEVENTH_CASES = [
    Case(f"rtx2080ti_2gpu_1node_{coll}_autodl_shm.txt", "l40s-8gpu-pcie",
         machine={"arch": "sm70", "ranks": 2, "pcie_gen": 3, "sockets": 1, "p2p": False, "gpus_per_uplink": 2},
         machine_class="pcie-1host",
         why=_AUTODL_2080TI.format(coll=coll))
    for coll in ("all_reduce", "all_gather", "broadcast", "reduce", "alltoall")]

#: the twenty-eighth set: a new source, the one-node run of an nccl-tests campaign on CSCS's Alps GH200 nodes
#: (boeschf/nccl-benchmark-on-alps-2025): all_reduce of the 4 GH200 of one node over NVLink without NVSwitch, the held-out
#: class h100-nvlink-1host (Hopper GPUs on a 4-GPU NVLink mesh, as the Snellius set).  Not taken: the campaign's multi-node
#: runs (HPE Slingshot through the aws-ofi-nccl plugin: no NIC kind of the project) and the same node count's runs of its
#: other configurations (the same machine and collective, one table kept).  Described from its source before any prediction
TWENTY_EIGHTH_CASES = [
    Case("gh200_4gpu_1node_all_reduce_alps.txt", "dgx-h100", version=(2, 26, 2), release_source="header",
         machine={"ranks": 4, **_H100_4MESH}, machine_class="h100-nvlink-1host",
         why="one CSCS Alps node (nid006664) of boeschf/nccl-benchmark-on-alps-2025 (run of 2025-03-18): 4 x \"NVIDIA GH200 "
             "120GB\", one process per GPU; NCCL's own lines: NCCL 2.26.2, \"NVLS multicast support is not available\" (no "
             "NVSwitch), 24 channels whose rings cover every pair, all \"via P2P/CUMEM\" (NVLink; the quad-GH200 board's "
             "links per pair not stated: the 4-GPU Hopper mesh of 6 links per pair assumed); Grace CPU (the preset's Intel "
             "default: NCCL's non-AMD rows); NCCL_NET/NCCL_NET_GDR_LEVEL/NCCL_CROSS_NIC set for the network (unused on one "
             "node); all_reduce 8 B - 4 GiB")]
_RTX2080TI_8 = ("8 hosts (node1-node3, gpu4-gpu8) of dexhunter/allreduce-experiments (runs committed 2021-06-27), 4 x "
                "\"GeForce RTX 2080 Ti\" each (Turing, PCIe Gen3 x16 by the card's data sheet; two GPUs per socket of a "
                "2-socket host by the log's CPU affinity, CPU model not stated: the preset's Intel default), one process per "
                "GPU (32 ranks); NCCL's own lines: NCCL 2.6.4, \"Could not enable P2P\" between the GPUs of a host, every "
                "intra-host hop \"via direct shared memory\" (SHM); Turing is read as `sm70` (assumed: the model has no "
                "sm75; NCCL 2.6.4's tuning.cc has no per-architecture rows, its one compute-capability test, line 165, "
                "enables LL128 only over NVLink, off here either way); "
                "NCCL_TREE_THRESHOLD=0 set but not read by 2.6.4 (no \"set by environment\" line); {net}; "
                "all_reduce 4 B - 512 MiB")

#: the twenty-ninth set: a new source, the 32-GPU nccl-tests all_reduce runs of an allreduce study
#: (dexhunter/allreduce-experiments, MIT): 8 hosts of 4 x RTX 2080 Ti without P2P, over one 100 Gb/s InfiniBand HCA per
#: host and over 10 Gb/s Ethernet (NCCL's socket transport), the held-out class pcie-multihost.  Not taken: the
#: repository's earlier 1 MiB - 256 MiB runs (committed 2021-06-26) of the same two configurations (the same machine
#: and sweep, the wider 4 B - 512 MiB runs kept), its linear-step runs (NCCL 2.4.7, 1 MiB or 2 MB steps, hundreds of rows) and its 16-GPU linear-step runs.
#: Each described from its source before any prediction
TWENTY_NINTH_CASES = [
    Case("rtx2080ti_32gpu_8node_all_reduce_ib_4gpn.txt", "l40s-8gpu-pcie", 8, 1, 12.5, "ib", version=(2, 6, 4),
         machine={"arch": "sm70", "ranks": 32, "pcie_gen": 3, "p2p": False}, machine_class="pcie-multihost",
         why=_RTX2080TI_8.format(net="one InfiniBand HCA per host (mlx5_0), 100 Gb/s by the repository's \"# 100GbIB\" "
                                     "(not printed), inter-host steps \"via NET/IB/0\", no GDRDMA in the log")),
    Case("rtx2080ti_32gpu_8node_all_reduce_socket10g_4gpn.txt", "l40s-8gpu-pcie", 8, 1, 1.25, "socket",
         version=(2, 6, 4),
         machine={"arch": "sm70", "ranks": 32, "pcie_gen": 3, "p2p": False}, machine_class="pcie-multihost",
         source_reused=True,
         why=_RTX2080TI_8.format(net="NCCL_IB_DISABLE=1: NCCL's socket transport over one Ethernet interface per host "
                                     "(enp136s0f0 or enp137s0f0), 10 Gb/s by the repository's \"# 10GbE\" (not printed)")),
]

#: the thirtieth set: a new source, an nccl-tests issue's one-host run on 8 x NVIDIA H20 (NVIDIA/nccl-tests#306, 2025-04):
#: all_reduce 1 MiB - 2 GiB of one host (the thread's tests ran without MPI, so each process drove its own host's 8 GPUs),
#: class h100-nvswitch-1host (in-sample: held out itself).  Not taken: the same post's other three tables (one of them a
#: disturbed run, the other two the same hosts and configuration).  Described from its source before any prediction
THIRTIETH_CASES = [
    Case("h20_8gpu_1node_all_reduce_issue306.txt", "dgx-h100", machine_class="h100-nvswitch-1host", held_out=True,
         why="host node3 of NVIDIA/nccl-tests#306 (GeofferyGeng, 2025-04): 8 x \"NVIDIA H20\" driven by one process "
             "(nGpus 8: nccl-tests built without MPI, so each host ran alone), \"H20*8+CX7*8(400G)\" per host by the "
             "author (no network used here); NVSwitch not stated (the 8-GPU HGX H20 board's NVSwitch and 18 NVLink 4 links "
             "per GPU assumed: the `dgx-h100` preset, Hopper's clock); NCCL version not printed (unknown: the Case "
             "default, 2.28 gates, assumed), no NCCL variable shown; all_reduce 1 MiB - 2 GiB"),
]

#: the thirty-first set: AMD data from a repository the eighth set's A100 OKE table already cites (source_reused):
#: Oracle's oci-hpc-oke guide (docs/running-nccl-rccl-tests-from-slurm-operator.md, 2026-06; another file and machine),
#: a two-host OCI BM.GPU.MI300X.8 all_reduce over 8 mlx5 RDMA HCAs per host (RoCE assumed), run through Slurm on OKE,
#: class amd-multihost (held out).  Described from its source before any prediction
THIRTY_FIRST_CASES = [
    Case("mi300x_16gpu_2node_all_reduce_oci_oke_slurm.txt", "mi300x", 2, 8, 50.0, "roce",
         machine_class="amd-multihost", source_reused=True,
         why="2 OCI BM.GPU.MI300X.8 bare-metal hosts x 8 AMD Instinct MI300X (xGMI assumed: the `mi300x` preset's), 16 "
             "processes (-g 1, mpirun over Slurm on OKE), 8 mlx5 RDMA HCAs (RoCE assumed) per host in NCCL_IB_HCA "
             "(the guide says \"over RDMA\"; speed not stated: 400 Gb/s assumed, Oracle's "
             "published shape), NCCL_IB_QPS_PER_CONNECTION=4, NCCL_IB_SL=0; rccl-tests develop:a52452e, RCCL version not "
             "printed (unknown: the Case default assumed); all_reduce 1 GiB - 16 GiB"),
]

#: the thirty-second set: NVIDIA tables from two new sources, both user notes in the stored GitHub code index whose
#: repository names the index does not give: a 2 x 8 H200 Oracle Cloud cluster's all_reduce over 8 RoCE NICs per host
#: (the oci-hpc sample job), the new held-out class h100-roce-multihost (no log of the earlier sets has Hopper hosts
#: over RoCE with more than one GPU per host; with it, source_reused, 2 x 8 H100 of an OCI tutorial page of the site of
#: the seventh set's A100 tables), and
#: a 16-GPU all_reduce of 4 OCI GB300 hosts in a multi-node NVLink domain (IMEX, NCCL_MNNVL_ENABLE=1, NVLS off), the
#: held-out class b200-nvl72 of the 64-rank GB300 tables (the class function names a rack's NVLink domain, not the run's
#: rank count).  Not taken: the other 16-GPU runs of the same cluster's notes (code index file id 60818708616: a
#: 4-row table without its header, and a run on other hosts printed as its 8 GiB row alone).  Each described from
#: its source before any prediction
THIRTY_SECOND_CASES = [
    Case("h200_16gpu_2node_all_reduce_oci_roce.txt", "hgx-h200", 2, 8, 50.0, "roce", version=(2, 27, 5),
         machine_class="h100-roce-multihost",
         why="2 hosts (GPU-6550, GPU-3841) of an OCI H200 Slurm cluster (\"super-ant\", Oracle's oci-hpc stack; code index "
             "file id 38991207769): 8 x \"NVIDIA H200\" per host (the `hgx-h200` preset: HGX NVSwitch board assumed), 16 "
             "processes (-g 1), both hosts on \"switch number 1\"; 8 RDMA netdevs per host (mlx5_0/3/4/5/6/9/10/11 by the "
             "notes' ibdev2netdev of GPU-4287; the run's hosts assumed alike), RoCE at 400 Gb/s each assumed (the "
             "OCI shape BM.GPU.H200.8, not named in the notes: oci-hpc's run script gives that shape these 8 HCAs; the rate not printed); NCCL 2.27.5 (its line); the "
             "likely job (assumed: the log names it) oci-hpc's samples/gpu/nccl_run_allreduce_H100_200.sbatch (commit "
             "f82152d) sets NCCL_CUMEM_ENABLE=0, NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL_IB_QPS_PER_CONNECTION=1, "
             "NCCL_IB_GID_INDEX=3, NCCL_IB_TC=41, NCCL_IB_SL=0, NCCL_IB_TIMEOUT=22, NCCL_NET_PLUGIN, "
             "NCCL_IGNORE_CPU_AFFINITY=1 and these 8 HCAs (no model term); CPU not stated (the preset's Intel "
             "default); all_reduce 1 GiB - 16 GiB"),
    Case("gb300_16gpu_4node_all_reduce_oke_imex.txt", "gb200-nvl72", version=(2, 29, 3),
         env={"NCCL_NVLS_ENABLE": "0", "NCCL_MIN_CTAS": "16"}, machine={"ranks": 16}, machine_class="b200-nvl72",
         why="4 OCI BM.GPU.GB300.4 hosts of a Slurm-on-OKE GB300 cluster (code index file id 60939665059, run of "
             "2026-05-06): 4 x \"NVIDIA GB300\" per host, 2 Grace CPUs assumed (from the shape: not in the notes), "
             "16 processes (-g 1), one IMEX channel per rank (the notes) and NCCL_MNNVL_ENABLE=1 (the job script: the log shows "
             "neither NVLS nor MNNVL), so the `gb200-nvl72` preset's one NVLink domain with 16 ranks (all four workers "
             "carry one nvidia.com/gpu.clique label: code index file id 60793204520; the 4 hosts in one rack "
             "assumed: not stated; GB300's NVLink 5 is the preset's 18 x 50 GB/s, the log's \"NVIDIA GB300\" read as sm100); "
             "NCCL 2.29.3 (its line); the job's NCCL_NVLS_ENABLE=0 and NCCL_MIN_CTAS=16 (modelled), NCCL_CUMEM_ENABLE=1, "
             "NCCL_WORK_FIFO_BYTES=0, NCCL_IB_QPS_PER_CONNECTION=16 and 4 RoCE rails per host through the Spectrum-X "
             "plugin (no model term); all_reduce 8 MiB - 8 GiB"),
    Case("h100_16gpu_2node_all_reduce_oci_roce_jp.txt", "dgx-h100", 2, 16, 25.0, "roce", version=(2, 21, 5),
         release_source="header",
         machine_class="h100-roce-multihost", source_reused=True,
         why="2 x OCI BM.GPU.H100.8 (Oracle Japan's OCI tutorial page \"NCCL Tests実行方法（BM.GPU.H100.8編）\", code index file id "
             "5466886451: the site of the A100 OCI fixtures, so source reused): 8 x \"NVIDIA H100 80GB HBM3\" per host (HGX "
             "NVSwitch assumed), 16 processes (-g 1), OCI's RoCE v2 cluster network, \"all 16 RDMA ports\" per host in "
             "NCCL_IB_HCA (stated), 200 Gb/s each assumed (not stated: OCI's 3.2 Tb/s for the shape over 16 ports); NCCL "
             "2.21.5 of the TensorFlow NGC 24.06 container (stated, not printed); NCCL_CUMEM_ENABLE=0, "
             "NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL_IB_GID_INDEX=3, NCCL_IB_TC=41, NCCL_NET_PLUGIN=none, "
             "NCCL_IGNORE_CPU_AFFINITY=1 (no model term); CPU not stated (the preset's Intel default); all_reduce "
             "1 GiB - 16 GiB"),
]

#: the thirty-third set: a new source, the opening post of GitHub issue NVIDIA/nccl-tests#331 (a stored copy in the
#: code index): sendrecv between 2 of the 4 A100-SXM-64GB of one node whose GPUs are joined by a direct NVLink 3 mesh
#: (topo -m: NV4 between every pair, no NVSwitch inferred; host lrdn2296, CINECA Leonardo Booster by its name), the new held-out
#: class a100-nvlink-1host (no earlier log has A100s on an NVLink mesh without NVSwitch).  Not taken: the thread's other
#: results (the NCCL_MIN_CTAS=8 retry, given in words).  Described from its source before any prediction
THIRTY_THIRD_CASES = [
    Case("a100_2gpu_1node_sendrecv_leonardo_nvlink.txt", "dgx-a100", collective="sendrecv", version=(2, 22, 3),
         env={"NCCL_BUFFSIZE": "4194304"},
         machine={"ranks": 2, "intra": "nvlink", "links_per_gpu": 12, "nvls_switch": False,
                  "link_matrix": ((0, 4), (4, 0))},
         machine_class="a100-nvlink-1host",
         why="one node (lrdn2296; CINECA Leonardo Booster by the host prefix, not named in the post) of "
             "NVIDIA/nccl-tests#331 (mredenti, replies 2025-07): 4 GPUs whose topo -m reads NV4 between every pair, the 2 "
             "used \"NVIDIA A100-SXM-64GB\" (a 4-GPU NVLink 3 mesh, the post's \"NVLink 3.0 ... 100 GB/s "
             "unidirectional\"; no NVSwitch inferred: NV4 to each of 3 peers = A100's 12 links), "
             "GPUs 0 and 1 used (4 links between them, 12 per GPU), one process with 2 threads (-t 2 -g 1); NCCL "
             "2.22.3 (its line), NCCL_P2P_LEVEL=NVL (no model term on one NVLink host) and NCCL_BUFFSIZE=4194304 "
             "(the default) set by environment, 8 p2p channels over P2P/direct pointer/read (its lines); CPU not "
             "stated (the dgx-a100 preset's AMD default kept); sendrecv_perf of nccl-tests 2.16.4, 8 B - 2 GiB"),
]

#: the thirty-fourth set: a new source, a Google Cloud documentation page (AI Hypercomputer, "Run NCCL on custom GKE
#: clusters that use A4X Max", CC BY 4.0; a stored copy in the code index): an all_gather of 2 A4X Max hosts x 4 GB300
#: in distinct NVLink domains, every inter-host byte over GPUDirect RDMA (RoCE, 8 x 400 Gb/s per host), the
#: held-out class b200-roce-multihost (Blackwell NVSwitch hosts over RoCE).  Not taken: the page's JobSet run (its
#: device list elided, its rank count not shown).  Described from its source before any prediction; its NICs
#: re-described by the review after it (docs/nccl-model.md)
THIRTY_FOURTH_CASES = [
    Case("gb300_8gpu_2node_all_gather_gcp_a4xmax_roce.txt", "hgx-b200", 2, 8, 50.0, "roce", version=(2, 28, 9),
         machine={"ranks": 8, "pcie_gen": 6}, machine_class="b200-roce-multihost",
         why="2 GKE nodes of GCP A4X Max (Google Cloud's page \"Run NCCL on custom GKE clusters that use A4X Max\", "
             "updated 2026-04-06; code index file id 59794567040): 4 x \"NVIDIA GB300\" per node, 8 processes (one per "
             "GPU), the two nodes in distinct NVLink domains (the page: the default pods land on separate node pools and "
             "the output shown is \"cross-domain RDMA throughput\"), so 4 GPUs of a host on NVLink 5 through NVSwitch "
             "(the `hgx-b200` preset's board with 4 ranks per host: GB300's 18 x 50 GB/s assumed alike; the Grace CPUs "
             "not modelled) and every inter-host byte over GPUDirect RDMA through Google's gIB scripts; 8 RDMA NICs per "
             "host at 400 Gb/s over RoCE (Google's accelerator-optimized machine page, code index file id 59672125728: "
             "A4X Max's ConnectX-8 SuperNICs on an \"eight-way rail-aligned\" network, \"up to 3,200 Gbps\"; a CX-8 "
             "runs Ethernet as 2 x 400G), each GPU's CX-8 on a PCIe Gen6 x16 link (NVIDIA at Hot Chips 2025: on GB300 "
             "NVL72 a CX-8 links the B300 GPU at Gen6 x16); described so by the review after the first prediction (it "
             "had 4 x 800 Gb/s on Gen5: see docs/nccl-model.md); NCCL 2.28.9 (nccl-headers=22809), the gIB scripts' "
             "NCCL variables not shown (assumed: no model term); all_gather_perf 4 KiB - 16 GiB (the page's command "
             "line says alltoall: its output header names all_gather)"),
]

#: the thirty-fifth set: a 4 x RTX 4090 all_reduce with P2P enabled by a patched driver (a README in the code index,
#: repository not exposed; very probably the host of the blog.chlc.cc 8 x RTX 4090 fixtures: same bus IDs and P2P
#: matrix, so source reused), in the held-out class pcie-1host.  Described from its source before any prediction (its
#: CPU and source_reused corrected by the review).  One table taken and dropped: its rows are an unseen log's
THIRTY_FIFTH_CASES = [
    Case("rtx4090_4gpu_1node_all_reduce_p2p_driver.txt", "l40s-8gpu-pcie",
         machine={"ranks": 4, "p2p": True, "sockets": 1, "cpu_vendor": "amd"}, machine_class="pcie-1host",
         source_reused=True,
         why="4 of the 8 x NVIDIA GeForce RTX 4090 (PCIe, no NVLink) of host GPU-RTX4090-4-4 (a P2P-driver README in "
             "the code index, file id 7963955543, repository not exposed): P2P enabled by the installed driver (its "
             "p2pBandwidthLatencyTest matrix: ~50 GB/s bidirectional within GPUs 0-3 and within 4-7, ~40 across), "
             "GPUs 0-3 driven by one process (-g 4), one group of the matrix: one socket assumed (sockets 1), P2P "
             "between every pair (`p2p`), PCIe Gen4 x16 assumed (the preset's), CPU not stated: AMD EPYC taken from the "
             "evidence that this is the blog.chlc.cc host of 2 x EPYC 7542 (bus IDs 0x01/0x25/0x41/0x61 and the "
             "same P2P matrix pair by pair; the review's finding, so source reused), NCCL version not printed "
             "(2.28 gates assumed), no NCCL variable shown; all_reduce 1 KiB - 1 GiB"),
]

#: the thirty-sixth set: one table from a document the earlier fixtures do not cite: a Korean Slurm-on-AWS walkthrough's
#: all_reduce over 2 g7e.8xlarge instances, 1 RTX PRO 6000 Blackwell Server Edition and 1 EFA NIC (100 Gb/s, GPUDirect
#: RDMA off) each, in the held-out class 1gpu-per-host.  Two tables taken and dropped, each an unseen log's rows
#: (`test_no_fit_reads_an_unseen_log`).  Described from its source before any prediction (its CPU and PCIe generation
#: cited by the review from a g7e family page)
THIRTY_SIXTH_CASES = [
    Case("rtxpro6000_2gpu_2node_all_reduce_aws_g7e_efa_1gpn.txt", "l40s-8gpu-pcie", 2, 1, 12.5, "efa",
         version=(2, 29, 2),
         env={"NCCL_PROTO": "simple", "NCCL_BUFFSIZE": "8388608"},
         machine={"ranks": 2, "arch": "sm120", "pcie_gen": 5, "cpu_vendor": "intel"}, machine_class="1gpu-per-host",
         why="2 AWS g7e.8xlarge Slurm nodes gpu-st-ml-1/2 of a Korean Slurm-on-AWS walkthrough (code index file id "
             "51806320406; the instance type named by the aws-ofi-nccl tuner's line): 1 x \"NVIDIA RTX PRO 6000 "
             "Blackwell Server Edition\" per node (PCIe, no NVLink: sm120 on the `l40s-8gpu-pcie` preset's PCIe host, "
             "PCIe Gen5 and an Intel Xeon Emerald Rapids host by a g7e family page, code index file id 51953258258), one process per node (-g 1, 2 ranks), 1 EFA NIC per node at 100 Gb/s (the document: "
             "\"EFA NIC 1개(100Gbps)\"; the log: found 1 nics), aws-ofi-nccl 1.18.0 with transport SENDRECV, GPUDirect "
             "RDMA off (its lines: disabling GDR, GDR 0: no model term), the plugin's NCCL_PROTO=simple and "
             "NCCL_BUFFSIZE=8388608 (modelled) and NCCL_P2P_NET_CHUNKSIZE=524288; NCCL 2.29.2 (its line); the family page "
             "says g7e supports GPUDirect RDMA, which this run's plugin disabled; all_reduce float, 8 B - 1 GiB"),
]

#: the thirty-seventh set: the bare-metal run of a new source, GitHub issue NVIDIA/nccl-tests#256 (a stored copy in the
#: code index): all_reduce 1 - 9 GiB over 2 Supermicro HGX H200 hosts x 8 GPUs, 8 ConnectX-7 (400 Gb/s) per host on an
#: Ethernet "IP switch" (RoCE assumed), one GPU and one NIC per PCIe Gen5 switch, in the held-out class
#: h100-roce-multihost.  Not taken: the thread's VM runs of the same hosts (GPUDirect RDMA lost in a misconfigured VM).
#: Described from its source before any prediction
THIRTY_SEVENTH_CASES = [
    Case("h200_16gpu_2node_all_reduce_roce_issue256.txt", "hgx-h200", 2, 8, 50.0, "roce",
         machine_class="h100-roce-multihost",
         why="the bare-metal hosts fs-207 and fs-208 of NVIDIA/nccl-tests#256 (wangjiafu0310, 2024-10; code index file id "
             "69437015114): \"2 H200 servers connected with the IP switch\", 8 x \"NVIDIA H200\" per host at the HGX "
             "board's bus IDs (the `hgx-h200` preset: the post's topology dump gives each GPU 18 NVLinks to NVSwitch "
             "targets and PCIe 32 GT/s x16), 16 processes (-g 1); each GPU behind a Broadcom PCIe Gen5 switch with one "
             "ConnectX-7 at 400 Gb/s (the dump: mlx5_0-2 shown, speed 400000, gdr 1; the VM passes 8 ConnectX-7 "
             "through), all 8 NICs per host used over RoCE assumed (Ethernet switch, NCCL_IB_HCA unset; a later run sets "
             "NCCL_IB_GID_INDEX=3), GPUDirect RDMA on (NCCL_NET_GDR_LEVEL=2: no model term); Intel Xeon Emerald "
             "Rapids (the dump's GenuineIntel model 207; the preset's Intel CPU); NCCL version not printed (unknown: "
             "the Case default, 2.28 gates, assumed, though the thread's date, 2024-10, puts it at 2.23 or older); "
             "all_reduce 1, 3 and 9 GiB (-f 3)"),
]

#: the thirty-eighth set: a new source, nebius/ml-cookbook's Run:ai README (read from the fork twinanda/ml-cookbook):
#: all_reduce 1 - 16 GiB over 2 Run:ai worker pods of 8 x "NVIDIA H200" each (one HGX H200 host per pod assumed) on
#: Nebius Managed Kubernetes, InfiniBand (8 x 400 Gb/s NDR per host assumed), the submit
#: script's NCCL_BUFFSIZE=8388608, in the in-sample class h100-ib-multihost (so held out itself); and a new source, crusoecloud/solutions-library's
#: cluster-test output: all_reduce 1 - 32 GiB over 2 Crusoe GB200 VMs x 4 GPUs, one process per VM (-g 4), the two in
#: one NVL72 NVLink domain (IMEX) assumed, in the held-out class b200-nvswitch-1host (8 ranks of one NVLink domain).
#: Neither repository feeds another fixture (the earlier Nebius and Crusoe tables are dstackai/dstack's).  Each described from its source before
#: any prediction
THIRTY_EIGHTH_CASES = [
    Case("h200_16gpu_2node_all_reduce_nebius_ib_runai.txt", "hgx-h200", 2, 8, 50.0, version=(2, 23, 4),
         release_source="header",
         env={"NCCL_BUFFSIZE": "8388608"}, machine_class="h100-ib-multihost", held_out=True,
         why="2 Run:ai MPI worker pods (demo-nccl-test-16-h200-worker-0/1) on Nebius Managed Kubernetes, the example output "
             "of nebius/ml-cookbook's runai/README.md (commit 40f10649, 2025-09-26, Cyril K of Nebius; read from the fork "
             "twinanda/ml-cookbook): 8 x \"NVIDIA H200\" per pod, each pod a whole 8-GPU host assumed (8 device lines a pod at the same PCI IDs on both; the first "
             "submit script, whose job name the pods carry, sets GPU_PER_NODE=1, so the run used an edited value), the HGX H200 board assumed (the `hgx-h200` preset: NVSwitch), 16 processes (-g 1, --map-by "
             "ppr:8:node); InfiniBand, 8 x 400 Gb/s NDR per host assumed (not stated: NCCL_IB_HCA=mlx5 only selects the "
             "Mellanox RDMA devices; the Nebius dstack fixture has that figure from Nebius's documentation for its H100 hosts; no source read gives the H200 hosts' NICs; Nebius's MLPerf "
             "Inference v6.0 file lists 8 x ConnectX-7 IB NDR 400Gb/s for its B200 hosts); the submit scripts (first "
             "version f9df2b27, 2025-08-27, whose job name the pods carry, and the README's later one) set "
             "NCCL_BUFFSIZE=8388608 (modelled), NCCL_IB_QPS_PER_CONNECTION=2, NCCL_IB_HCA=mlx5, NCCL_SOCKET_IFNAME=eth0 "
             "and hcoll/ucc off (no model term); NCCL 2.23.4 assumed from the image tag nccl-tests:2.23.4-ubu22.04-cu12.4 "
             "(not printed); CPU not stated (the preset's Intel default); all_reduce 1 GiB - 16 GiB"),
    Case("gb200_8gpu_2node_all_reduce_crusoe_nvl72_g4.txt", "gb200-nvl72", version=(2, 28, 7),
         machine={"ranks": 8, "gpus_per_process": 4}, machine_class="b200-nvswitch-1host",
         why="2 Crusoe GB200 VMs (apple-0, apple-1) of crusoecloud/solutions-library's create-vms-and-run-nccl-test "
             "(nccltest_output.txt, commit 57e37b8d, 2026-02-06, Abe Sharp; removed the next day): 4 x \"NVIDIA GB200\" "
             "per VM (node type gb200-186gb-nvl-ib.4x with imex_support = true: the solution's terraform.tfvars \"GB200 "
             "testing\" lines and README), Grace hosts (the aarch64 driver lines), one process per VM driving its 4 GPUs "
             "(hostfile slots=1, -g 4), so 8 ranks in one NVLink 5 domain across the two VMs assumed (IMEX on, one "
             "NVL72 rack: not printed; the node type's ib.4x suggests 4 x 400 Gb/s a VM, about 200 GB/s, which would "
             "cap a 2-host all_reduce near 350 GB/s busbw, far below the log's), the `gb200-nvl72` preset with 8 ranks (the class function reads 8 GPUs of one "
             "NVSwitch domain as b200-nvswitch-1host, as the OCI GB300 two-host tables); NCCL 2.28.7 (nccl-headers=22807), "
             "no NCCL variable set by the script (the image's NCCL configuration not shown); all_reduce 1 GiB - 32 GiB"),
]

#: the thirty-ninth set: the bare-metal run of a new source, GitHub issue NVIDIA/nccl-tests#380 (a stored copy in the code
#: index): all_reduce 1, 3 and 9 GiB over 2 HGX H200 hosts x 8 GPUs with 4 ConnectX-7 InfiniBand NICs each (one NIC per
#: two GPUs, 400 Gb/s NDR assumed), in the in-sample class h100-ib-multihost (so held out itself).  Not taken: the
#: thread's passthrough-VM runs of the same hosts.  Described from its source before any prediction
THIRTY_NINTH_CASES = [
    Case("h200_16gpu_2node_all_reduce_ib_4nic_issue380.txt", "hgx-h200", 2, 4, 50.0, "ib",
         machine_class="h100-ib-multihost", held_out=True,
         why="the two bare-metal servers of NVIDIA/nccl-tests#380 (opening post, 2026-06; code index file id 69552560476): "
             "8 x \"NVIDIA H200\" per host, NV18 between every GPU pair in nvidia-smi topo -m (the HGX H200 NVSwitch "
             "board: the `hgx-h200` preset), 16 processes (mpirun -np 16, -g 1); 4 x ConnectX-7 per host (\"4x "
             "NVIDIA/Mellanox ConnectX-7 NICs\"), InfiniBand (lstopo: \"(InfiniBand)\", netdevs ib0..ib3), each NIC on a "
             "PCIe switch shared by two GPUs (PIX to one, PXB to the other), two per CPU package; 400 Gb/s NDR per NIC "
             "assumed (not stated: the adapter's top rate, chosen over NDR200 from the post's own 80 GB/s busbw on one NIC); NCCL version not printed (the Case default, 2.28 gates, assumed; the thread is of "
             "2026-06); CPU not stated (the preset's default); no NCCL variable shown; all_reduce 1, 3 and 9 GiB "
             "(-b 1G -e 16G -f 3)"),
]

_HLC = ("{n} x \"NVIDIA A100-SXM4-80GB\" of one host, one process driving them (-g {n}) inside a Docker container (3767c65d25c4) "
        "of a Chinese-language \"NCCL Note\" notebook (code index file id 36927849710, and its later copy file id 36910972912, "
        "notes dated 2025, with the same logs; repository and author not exposed): NCCL 2.20.5 (its line; the container's "
        "stock NCCL assumed, not the note's own builds), 4 devices used (bus 0xa4-0xe7; how many the container sees not "
        "printed), the HPC-X NCCL plugin under /opt/hpcx with no InfiniBand device (one host: no network used), "
        "NCCL_WORK_FIFO_DEPTH=4194304 from the environment (no model term), 24 coll channels, every hop P2P/direct pointer/read; "
        "{n} GPUs of an 8-GPU HGX A100 NVSwitch board assumed (the `dgx-a100` preset with {n} ranks: the note does not describe "
        "the host's NVLink fabric; chosen over the 4-GPU HGX A100 board's 4 NVLinks a pair from the log's 24 channels between 2 "
        "GPUs and its own 2-GPU busbw, 192 GB/s all_reduce and 211 GB/s sendrecv at 512 MiB, beyond 4 NVLinks); CPU not stated "
        "(the preset's); {coll}, 128 - 512 MiB")

_BESSEMER = ("4 x Tesla V100-PCIE-32GB (bus 0x3d-0x40) of bessemer-node026, \"(no NVLINK)\", the University of Sheffield "
             "Bessemer cluster's GPU node (rcgsheffield/sheffield_hpc's bessemer/software/libs/cuda.rst, commit 0ccb359f, "
             "code index file id 8209252139; "
             "its cluster_specs.rst: a Dell PowerEdge C4140, 2 x Intel Xeon Gold 6138, 4 x V100 32 GiB), one process "
             "driving the 4 GPUs (-g 4); the 4 behind one PCIe Gen3 switch on one socket (sockets 1) with P2P through it "
             "(`p2p`) assumed (consecutive bus numbers; topology and transport not printed; a Dell white paper's C4140 "
             "\"Configuration B\", Fig. 10, has the four V100 PCIe behind one switch), PCIe Gen3 (the card's), "
             "{nccl}; no NCCL variable shown; all_reduce 8 B - 128 MiB")

#: the fortieth set: one new source, a Chinese-language NCCL study notebook read from the stored GitHub code index (file id
#: 36927849710, a later copy file id 36910972912; repository not exposed): three one-host runs inside a Docker
#: container of an A100-SXM4-80GB host, NCCL 2.20.5, all_reduce on 2 and 4 GPUs and sendrecv on 2 GPUs driven by one
#: process (-g 2 / -g 4), 128 - 512 MiB; the GPUs read as part of an 8-GPU HGX A100 NVSwitch board (assumed), so the
#: in-sample class a100-nvswitch-1host (each held out itself); the 4-GPU and sendrecv runs are the same note's other runs (source_reused).  And a second new source,
#: the University of Sheffield's HPC documentation (rcgsheffield/sheffield_hpc): all_reduce -g 4 on the 4 x Tesla
#: V100-PCIE-32GB of the Bessemer cluster's GPU node (no NVLink; one PCIe switch and P2P assumed), NCCL 2.4.2 and 2.8.3
#: (the modules the page names), class pcie-1host (held out).  Each described from its source before any prediction
FORTIETH_CASES = [
    Case("a100_2gpu_1node_all_reduce_hlc_note_g2.txt", "dgx-a100", version=(2, 20, 5), machine={"ranks": 2},
         machine_class="a100-nvswitch-1host", held_out=True, why=_HLC.format(n=2, coll="all_reduce")),
    Case("a100_4gpu_1node_all_reduce_hlc_note_g4.txt", "dgx-a100", version=(2, 20, 5), machine={"ranks": 4},
         machine_class="a100-nvswitch-1host", held_out=True, source_reused=True,
         why=_HLC.format(n=4, coll="all_reduce") + " (its INFO lines: NVLS multicast not available on each GPU)"),
    Case("a100_2gpu_1node_sendrecv_hlc_note_g2.txt", "dgx-a100", version=(2, 20, 5), machine={"ranks": 2},
         collective="sendrecv", machine_class="a100-nvswitch-1host", held_out=True, source_reused=True,
         why=_HLC.format(n=2, coll="sendrecv")),
    Case("v100pcie_4gpu_1node_all_reduce_bessemer_nccl2.4.2.txt", "l40s-8gpu-pcie", version=(2, 4, 2),
         release_source="header", machine={"arch": "sm70", "ranks": 4, "pcie_gen": 3, "sockets": 1, "p2p": True},
         machine_class="pcie-1host", why=_BESSEMER.format(nccl="NCCL 2.4.2 (the module the page names for the run: "
                                                              "NCCL/2.4.2-gcccuda-2019a, CUDA 10.1)")),
    Case("v100pcie_4gpu_1node_all_reduce_bessemer_nccl2.8.3.txt", "l40s-8gpu-pcie", version=(2, 8, 3),
         release_source="header", machine={"arch": "sm70", "ranks": 4, "pcie_gen": 3, "sockets": 1, "p2p": True},
         machine_class="pcie-1host", source_reused=True,
         why=_BESSEMER.format(nccl="NCCL 2.8.3 (the module the page names for the run: NCCL/2.8.3-CUDA-11.1.1; the "
                                   "same host's later run)")),
]

#: the forty-first set: a new source, aws-ia/terraform-aws-eks-blueprints' eks-efa example: all_reduce 1 B - 1 GiB over
#: 2 AWS g4dn.metal nodes, one Tesla T4 and one EFA (100 Gb/s assumed, no GPUDirect RDMA) each, NCCL 2.12.7, class
#: 1gpu-per-host.  Described from its source before any prediction (NVIDIA/nccl-tests#350's gather, described beside
#: it, was dropped at review: a misconfigured run, GDR set on one host only, the thread's subject)
FORTY_FIRST_CASES = [
    Case("t4_2gpu_2node_all_reduce_aws_g4dn_efa_1gpn.txt", "l40s-8gpu-pcie", 2, 1, 12.5, "efa", version=(2, 12, 7),
         env={"NCCL_PROTO": "simple"}, machine={"ranks": 2, "arch": "sm70", "pcie_gen": 3, "cpu_vendor": "intel"},
         machine_class="1gpu-per-host",
         why="2 AWS g4dn.metal nodes of aws-ia/terraform-aws-eks-blueprints' eks-efa example (README and main.tf, commit "
             "a56919df, 2023-05-14; Apache-2.0): one Tesla T4 per worker pod, one pod per node (2 ranks, -g 1), the "
             "`l40s-8gpu-pcie` preset's PCIe GPU slot (no NVLink), Turing read as sm70 (NCCL's tuning tables put it in the "
             "Volta row; the model has no sm75), PCIe Gen3 (the card's, assumed); one EFA per node (main.tf: one "
             "interface_type efa; the log: found 1 nics) at 100 Gb/s (AWS's g4dn.metal figure, assumed), GPUDirect RDMA "
             "not used (no GDRDMA on any channel: no model term), aws-ofi-nccl 1.5.0's NCCL_PROTO=simple (modelled); "
             "Intel Xeon host (AWS's g4dn figure, assumed); NCCL 2.12.7 (its line); all_reduce float 1 B - 1 GiB"),
]

_MOC = ("2 hosts of the MOC/NERC cluster in CCI-MOC/roce-testing's RHELAI/3_nccl_tests/logs (first added at its commit "
        "0253e5a, \"initial commit\", 2025-04-02, as RHELAI/4_nccl_tests/logs; 9c5b4242 only renamed them, content "
        "unchanged; no licence file), MOC-R4PCC04U37 and -U35, one process per host on its GPU 0 (-g 1, 2 ranks), "
        "\"NVIDIA H100 80GB HBM3\" (H100 SXM5: the `dgx-h100` preset's GPU; each host holds 4, the board not described, "
        "one used); one RoCE NIC per host (NCCL_IB_HCA=mlx5_5, \"mlx5_5:1/RoCE\") at 400 Gb/s (the README's \"Largest "
        "possible bandwidth value: 400 Gbps\"); GPUDirect RDMA not used ({gdr}): GPU 0 (bus 06) is farther from mlx5_5 "
        "than a shared PCIe switch (the all_reduce log's \"GDR 0\" under NCCL's default GDR level), while the same job's "
        "4-GPU sendrecv log connects on that NIC \"via NET/IB/1/GDRDMA/Shared\": the hosts can do GPUDirect RDMA, GPU 0's "
        "distance from the NIC loses it (a SYS path, read from the log's channels: _MOC_MACHINE); NCCL 2.26.2 (its "
        "line), internal net "
        "plugin, NCCL_ALGO=RING (modelled), 2 coll and 2 p2p channels printed; GPU 0's process and proxy threads pinned "
        "to CPUs 0 and 256, an AMD CPU (the later NERC notes: EPYC 9754); {coll}, 1 GiB - 25 GiB in 2 GiB steps")

#: GPU 0's NIC path on the MOC hosts, from the logs: "GDR 0" under NCCL's default level puts it beyond PXB (PHB or
#: SYS), and the 2 coll channels printed are a 1-channel graph under 25 GB/s (connect.cc doubles it; search.cc lines
#: 898-902 keep 1), which a PHB path at the H100's PCIe Gen5 (48 GB/s) does not give and a SYS path through the
#: socket link (AMD_BW 16 GB/s: one channel at 15) does; the CPU is AMD by the later NERC notes on the same racks
#: (AMD EPYC 9754; the notes docs/nccl-model.md lists with the forty-second set).  SYS over PHB: the 4-GPU log's PXN
#: relay "NET/IB/1(2)" (GPU 2, bus a6, serves mlx5_5; GPU 0 is at bus 06).  Not independent: revised after the
#: model's count error here was known, from the log's own count and relay; a PHB path with a PCIe Gen4 hop (24 GB/s)
#: would also give 1 x 24 -> 2 channels (printed_channels.INFERRED_FROM_COUNT)
_MOC_MACHINE = {"ranks": 2, "nic_path": "SYS", "cpu_vendor": "amd"}

#: the forty-second set: a new source, CCI-MOC/roce-testing (the Mass Open Cloud's RoCE tests, RHEL AI): all_reduce and
#: sendrecv over 2 hosts x 1 H100 SXM5, one 400 Gb/s RoCE NIC each, GPUDirect RDMA off (GPU 0 far from the NIC), NCCL
#: 2.26.2, NCCL_ALGO=RING, 1 - 25 GiB; class 1gpu-per-host (held out); the sendrecv table is the same hosts' other run
#: (source_reused).  Described from its source before any prediction
FORTY_SECOND_CASES = [
    Case("h100_2gpu_2node_all_reduce_roce_nogdr_moc_1gpn.txt", "dgx-h100", 2, 1, 50.0, "roce", version=(2, 26, 2),
         env={"NCCL_ALGO": "RING"}, machine=_MOC_MACHINE, machine_class="1gpu-per-host",
         why=_MOC.format(gdr="the log's \"GDR 0\"", coll="all_reduce")),
    Case("h100_2gpu_2node_sendrecv_roce_nogdr_moc_1gpn.txt", "dgx-h100", 2, 1, 50.0, "roce", version=(2, 26, 2),
         env={"NCCL_ALGO": "RING"}, collective="sendrecv", machine=_MOC_MACHINE, machine_class="1gpu-per-host",
         source_reused=True,
         why=_MOC.format(gdr="every channel of the log \"via NET/IB/1/Shared\", no \"/GDRDMA\"; no \"GDR\" line",
                         coll="sendrecv (the same hosts' run of the same day)")),
]

#: the forty-third set: a new source, cybertronai/aws-network-benchmarks (Yaroslav Bulatov, 2019): all_reduce 8 B - 10 MiB
#: over 2 hosts x 8 Tesla V100-SXM2-32GB through EFA (aws-ofi-nccl, provider efa;ofi_rxr), NCCL 2.4.6, NCCL_TREE_THRESHOLD=0,
#: the hosts read as AWS p3dn.24xlarge (the script's default instance, assumed), class v100-efa-multihost (held out).
#: Described from its source before any prediction
FORTY_THIRD_CASES = [
    Case("v100_16gpu_2node_all_reduce_aws_p3dn_efa_nccl2.4.6_cybertronai.txt", "dgx1-v100", 2, 1, 12.5, "efa",
         version=(2, 4, 6), env={"NCCL_TREE_THRESHOLD": "0"}, machine_class="v100-efa-multihost",
         why="2 hosts of cybertronai/aws-network-benchmarks' nccltest_output.txt (commit 222b7a06, 2019-06-08, Yaroslav "
             "Bulatov; licence not stated): 8 x Tesla V100-SXM2-32GB each (the device lines), 16 processes (mpirun -n 16 "
             "-N 8, -g 1), EFA through aws-ofi-nccl (\"Selected Provider is efa;ofi_rxr\", NET/AWS Libfabric between hosts, "
             "NIC distance SYS, no GDRDMA), P2P/IPC inside a host, 2 rings; NCCL 2.4.6 (its line); NCCL_TREE_THRESHOLD=0 "
             "(\"Trees disabled\": ring at every size); the hosts AWS p3dn.24xlarge (assumed: nccl_multiversion.py's "
             "default instance and the README's): the `dgx1-v100` preset's hybrid cube mesh and one 100 Gb/s EFA (AWS's "
             "instance documentation, assumed); the FI_OFI_RXR_* / FI_EFA_MR_CACHE_ENABLE variables have no model term; "
             "all_reduce float 8 B - 10 MiB"),
]

_AICR_A0008 = ("4 of the 8 NVIDIA RTX PRO 6000 Blackwell Server Edition of AICR host a0008 (mghpcc/aicr-benchmarks, "
               "out-1socket/nvhpc-26.3-a0008-9679, commit d14c76f, 2026-05-06; results_rtx6000.md Table 2): PCIe Gen5 "
               "x16 per GPU, no NVLink, 2 x AMD EPYC 9575F in NPS=4, GPUs 0-3 on socket 0, one per sub-NUMA die, no "
               "GPU pair sharing a PCIe switch (every pair SYS), IOMMU off and ACS off (stated); one process (-g 4), "
               "no NCCL variable set (defaults); NCCL 2.29.3 of NVHPC 26.3 (nccl-library=22903), nccl-tests 2.18.3; "
               "transport not printed: SHM through host memory, no P2P (inferred from the repository's later a0007 "
               "study, results_a0007_postfw.md: at NCCL defaults a group of more than two of these GPUs stages every "
               "byte through host memory, and a0007 at defaults matches this a0008 run on every collective; assumed; "
               "NCCL's gate, NVIDIA/nccl v2.29.3-1 src/graph/paths.cc ncclTopoCheckP2p lines 318-324: P2P level PXB by "
               "default, raised to SYS on AMD x86 only when the node's topology holds <= 2 GPUs, and every pair here "
               "is SYS), so the `l40s-8gpu-pcie` preset's SHM host as sm120, PCIe Gen5, one socket, an AMD host, 4 "
               "ranks, its GPUs on 4 NUMA nodes (NPS=4, one GPU per die: stated), which NCCL's topology joins by "
               "16 GB/s SYS links (gpu_numa_nodes); the NUMA dies' Infinity Fabric has no model term; {coll}, "
               "1 MiB - 16 GiB in 4x steps")

#: the forty-fourth set: more tables of the AICR cluster's nccl-tests suite (mghpcc/aicr-benchmarks, the source of the
#: twenty-fourth set, so ``source_reused``), from files no fixture used: the seven collectives of a 4-GPU run on one
#: socket of an 8 x RTX PRO 6000 Blackwell PCIe host (no NVLink, no PCIe switch, NCCL defaults: SHM inferred from the
#: repository's own later study; class pcie-1host), a sendrecv of 2 such hosts with one GPU each over NDR InfiniBand
#: with GPUDirect RDMA (class 1gpu-per-host), and a 2 x 2 B200 all_reduce over InfiniBand at NCCL's default algorithm
#: (class b200-ib-multihost; the repository's own ib_write_bw GPU-memory rate of its B200 hosts, 27.2 GB/s per
#: direction, as the b0029 pair's cases).  NCCL 2.29.3 throughout.  Described from their sources before any prediction
FORTY_FOURTH_CASES = [
    *[Case(f"rtxpro6000_4gpu_1node_{coll}_aicr_a0008_shm.txt", "l40s-8gpu-pcie", version=(2, 29, 3),
           machine={"arch": "sm120", "ranks": 4, "pcie_gen": 5, "cpu_vendor": "amd", "sockets": 1,
                    "gpu_numa_nodes": 4},
           machine_class="pcie-1host", source_reused=True, why=_AICR_A0008.format(coll=coll))
      for coll in ("sendrecv", "reduce", "broadcast", "reduce_scatter", "all_gather", "all_reduce", "alltoall")],
    Case("rtxpro6000_2gpu_2node_sendrecv_aicr_ib_gdr_1gpn.txt", "l40s-8gpu-pcie", 2, 1, 50.0, "ib", version=(2, 29, 3),
         machine={"ranks": 2, "arch": "sm120", "pcie_gen": 5, "cpu_vendor": "amd"}, machine_class="1gpu-per-host",
         source_reused=True,
         why="AICR hosts a0009 and a0010 of mghpcc/aicr-benchmarks (out-2node/nvhpc-26.3-a0009-9666, commit d14c76f, "
             "2026-05-06; results_rtx6000.md Table 3): one NVIDIA RTX PRO 6000 Blackwell Server Edition used per host "
             "(device 0; PCIe Gen5 x16, no NVLink: sm120 on the `l40s-8gpu-pcie` preset's PCIe host), 2 x AMD EPYC "
             "9575F per host, one process per host (-g 1, 2 ranks), an NDR InfiniBand NIC per host at 400 Gb/s "
             "(stated: 50 GB/s per direction), one NIC used (assumed), GPUDirect RDMA in use (stated: nvidia_peermem "
             "installed; the GPU's PCIe path to its NIC not stated: the model's default PXB), NCCL defaults assumed "
             "(the committed 2nodes-2gpus.sh loops over ten tests, the log holds only sendrecv: the script does not "
             "match the log); NCCL 2.29.3 of NVHPC 26.3 (nccl-library=22903); the repository's ~25 GB/s 'GDRDMA bidir "
             "budget' is read off this table, not measured apart, so no nic_dma_gbs; sendrecv, 1 MiB - 16 GiB in 4x "
             "steps"),
    Case("b200_4gpu_2node_all_reduce_aicr_ib_2gpn.txt", "hgx-b200", 2, 2, 50.0, "ib", version=(2, 29, 3),
         machine={"ranks": 4, "cpu_vendor": "amd", "nic_dma_gbs": 27.2}, machine_class="b200-ib-multihost",
         source_reused=True,
         why="AICR hosts b0016 and b0019 of mghpcc/aicr-benchmarks (out-2node/nvhpc-26.3-sharp-ab-b0016-36306, commit "
             "ac1fda8, 2026-06-05, its 'RUN A: SHARP OFF (default algo, Ring)'; results_sharp.md): 8 x NVIDIA B200 per "
             "host on NVLink 5 / NVSwitch (the `hgx-b200` preset's board), 9 NDR ConnectX-7 rails at 400 Gb/s per host "
             "(inter-node-nccl.md), each GPU PIX to its NIC behind a Broadcom PEX890xx switch, AMD Turin host "
             "(stated); 2 GPUs per host used (devices 0-1, one process per host, -g 2, 4 ranks) and 2 NICs per host "
             "(results_sharp.md: 'With only 2 NICs/node'; each GPU's own assumed), only the 4 management NICs excluded "
             "(NCCL_IB_HCA: mlx5_12 eligible), NCCL_COLLNET_ENABLE=0, NCCL_ALGO not set; the NICs' GPU-memory rate the "
             "repository's ib_write_bw of its B200 pair b0029/b0030 (diag-aicr-gdrdma.md: 27.2 GB/s per direction "
             "bidirectional), which its follow-up (aicr-followup/REPORT.md, 2026-08-10) finds 'not a platform "
             "property' but a cluster defect of the PEX890xx switch-local GPU-to-NIC GPUDirect RDMA path, relaxed "
             "ordering ruled out; the same PIX-behind-PEX890xx design on these hosts, so assumed for them (measured on "
             "b0029/b0030, not b0016/b0019): nic_dma_gbs 27.2; NCCL 2.29.3 of NVHPC 26.3 (nccl-library=22903) with "
             "HPC-X's SHARP plugin loaded; all_reduce, 1 MiB - 16 GiB in 4x steps"),
]

ALL_CASES = (CASES + NEW_CASES + THIRD_CASES + FOURTH_CASES + FIFTH_CASES + SIXTH_CASES + SEVENTH_CASES
             + EIGHTH_CASES + NINTH_CASES + TENTH_CASES + ELEVENTH_CASES + TWELFTH_CASES + THIRTEENTH_CASES
             + FOURTEENTH_CASES + FIFTEENTH_CASES + SIXTEENTH_CASES + SEVENTEENTH_CASES
             + EIGHTEENTH_CASES + NINETEENTH_CASES + TWENTIETH_CASES + TWENTY_FIRST_CASES
             + TWENTY_SECOND_CASES + TWENTY_THIRD_CASES + TWENTY_FOURTH_CASES + TWENTY_FIFTH_CASES
             + TWENTY_SIXTH_CASES + TWENTY_SEVENTH_CASES + TWENTY_EIGHTH_CASES + TWENTY_NINTH_CASES
             + THIRTIETH_CASES + THIRTY_FIRST_CASES + THIRTY_SECOND_CASES + THIRTY_THIRD_CASES
             + THIRTY_FOURTH_CASES + THIRTY_FIFTH_CASES + THIRTY_SIXTH_CASES + THIRTY_SEVENTH_CASES
             + THIRTY_EIGHTH_CASES + THIRTY_NINTH_CASES + FORTIETH_CASES + FORTY_FIRST_CASES
             + FORTY_SECOND_CASES + FORTY_THIRD_CASES + FORTY_FOURTH_CASES)


def held_out(case: Case) -> bool:
    """Whether no fit may see ``case``: its class is of the fixed held-out split, or it is held out itself."""
    return case.held_out or case.machine_class in HELD_OUT_CLASSES


#: the in-sample split: the only cases a fit may see
IN_SAMPLE = [c for c in ALL_CASES if not held_out(c) and not c.skip_reason]
HELD_OUT = [c for c in ALL_CASES if held_out(c)]
