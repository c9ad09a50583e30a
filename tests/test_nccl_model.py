"""synth.model.nccl: NCCL's formulas checked against numbers computed by hand from its published
tables, the effect of each environment variable, the published / logged anchor points, and the
tuner-plugin configuration read back by an independent reader."""

from __future__ import annotations

import csv

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.bandwidth import latency_us
from synth.model.nccl.tuner_config import MAX_BYTES, tuner_rows, write_tuner_config
from topo_probe import cluster, get_preset
from topo_probe.errors import InvalidArgument

H100 = NcclMachine.from_topology(get_preset("dgx-h100"))
MI300X = NcclMachine.from_topology(get_preset("mi300x"))
P = DEFAULT_PARAMS


def model(machine=H100, **env):
    return NcclModel(machine, env=NcclEnv.from_environ({k: str(v) for k, v in env.items()}))


# ------------------------------------------------------------------ NCCL's own numbers, by hand
def test_nccl_view_latency_is_nccls_table():
    # tuning.cc: Ring/Simple baseLat 8.4 us + 2(n-1) = 14 NVLink hops of 3.4 us; LL 6.6 + 14 x 0.6
    assert latency_us(H100, "allreduce", "ring", "Simple", "nccl", P) == pytest.approx(8.4 + 14 * 3.4)
    assert latency_us(H100, "allreduce", "ring", "LL", "nccl", P) == pytest.approx(6.6 + 14 * 0.6)
    # Tree: 2 x ((ppn - 1) x intra + log2(nodes) x inter) on one node: 2 x 7 x 0.6 + 6.8
    assert latency_us(H100, "allreduce", "tree", "LL", "nccl", P) == pytest.approx(6.8 + 2 * 7 * 0.6)
    # allgather on a ring has n - 1 steps
    assert latency_us(H100, "allgather", "ring", "LL128", "nccl", P) == pytest.approx(14.0 + 7 * 1.9)


def test_ring_simple_time_by_hand():
    m = model()
    b = 18 * P.link_gbps[("nvlink", "sm90")]                  # GB/s per direction of one H100
    algbw = b * 8 / 14                                          # ring allreduce: n / 2(n-1)
    lat = P.base_us["Simple"] + 14 * P.hop_us[("sm90", "Simple")] + P.launch_us
    nbytes = 1 << 30
    assert m._time("allreduce", "ring", "Simple", nbytes, "real") == pytest.approx(lat + nbytes / (1e3 * algbw))


def test_ll_quarter_bandwidth_capped_by_llmaxbw():
    m = model()
    b = 18 * P.link_gbps[("nvlink", "sm90")]
    algbw = min(141.0, b / 4) * 8 / 14                          # LL: busBw/4, capped at Hopper's 141 GB/s
    nbytes = 1 << 20
    t = m._time("allreduce", "ring", "LL", nbytes, "real")
    lat = P.base_us["LL"] + 14 * P.hop_us[("sm90", "LL")] + P.launch_us
    assert t == pytest.approx(lat + nbytes / (1e3 * algbw))


def test_launch_cost_grows_with_gpus_per_process():
    one, eight = H100, H100.with_(gpus_per_process=8)
    d = model(eight)._time("allreduce", "ring", "LL", 8, "real") - model(one)._time("allreduce", "ring", "LL", 8, "real")
    assert d == pytest.approx(7 * P.launch_per_gpu_us)


# ------------------------------------------------------------------ environment variables
def test_nccl_algo_ring_forces_the_ring():
    assert model().choose("allreduce", 1 << 30).algorithm == "nvls"
    assert model(NCCL_ALGO="Ring").choose("allreduce", 1 << 30).algorithm == "ring"
    assert model(NCCL_ALGO="^nvls,ring").choose("allreduce", 1 << 30).algorithm == "tree"
    assert model(NCCL_ALGO="allreduce:tree").choose("allreduce", 1 << 30).algorithm == "tree"


def test_nccl_proto_restricts_protocols():
    assert model(NCCL_ALGO="Ring").choose("allreduce", 1024).protocol == "LL"
    assert model(NCCL_ALGO="Ring", NCCL_PROTO="Simple").choose("allreduce", 1024).protocol == "Simple"
    assert model(NCCL_ALGO="Ring", NCCL_PROTO="^LL").choose("allreduce", 1024).protocol == "LL128"


def test_nvls_enable_zero_disables_nvls():
    assert model(NCCL_NVLS_ENABLE=0).choose("allreduce", 1 << 30).algorithm != "nvls"


def test_max_and_min_channels_scale_bandwidth():
    full = model(NCCL_ALGO="Ring").choose("allreduce", 4 << 30)
    four = model(NCCL_ALGO="Ring", NCCL_MAX_NCHANNELS=4).choose("allreduce", 4 << 30)
    assert (full.channels, four.channels) == (16, 4)
    assert four.time_us / full.time_us == pytest.approx(4.0, rel=0.05)     # a quarter of the channels
    assert model(NCCL_MIN_NCHANNELS=32).channels == 32


def test_p2p_disable_goes_through_host_memory():
    fast = model(NCCL_ALGO="Ring").time_us("allreduce", 1 << 30)
    slow = model(NCCL_ALGO="Ring", NCCL_P2P_DISABLE=1).time_us("allreduce", 1 << 30)
    assert slow > 5 * fast                                      # PCIe Gen5 twice, not 18 NVLinks


def test_collnet_needs_the_network_and_the_variable():
    m2 = NcclMachine.from_topology(cluster("dgx-h100", 2), collnet=True)
    assert "collnet_direct" not in {a for a, _ in model(m2).candidates("allreduce")}
    assert "collnet_direct" in {a for a, _ in model(m2, NCCL_COLLNET_ENABLE=1).candidates("allreduce")}


@pytest.mark.parametrize("env", [{"NCCL_ALGO": "warp"}, {"NCCL_PROTO": "LL256"}, {"NCCL_MAX_NCHANNELS": "x"},
                                 {"NCCL_MIN_NCHANNELS": "0"}])
def test_bad_variables_are_one_line_errors(env):
    with pytest.raises(InvalidArgument) as e:
        NcclEnv.from_environ(env)
    assert "\n" not in str(e.value) and next(iter(env)) in str(e.value)


# ------------------------------------------------------------------ anchors the issue names
def test_h100_nvls_allreduce_near_the_published_479():
    c = model().choose("allreduce", 8 << 30)
    assert c.algorithm == "nvls" and c.busbw_gbps(8) == pytest.approx(479, rel=0.10)


@pytest.mark.parametrize("size,real", [(64 << 20, 320.23), (1 << 30, 360.94), (8 << 30, 368.00)])
def test_h100_ring_allreduce_matches_the_ring_log(size, real):
    c = model(NCCL_ALGO="Ring", NCCL_NVLS_ENABLE=0).choose("allreduce", size)
    assert c.busbw_gbps(8) == pytest.approx(real, rel=0.10)


def test_mi300x_1kb_allreduce_latency_near_the_rccl_log():
    assert model(MI300X).time_us("allreduce", 1024) == pytest.approx(13.7, rel=0.25)


# ------------------------------------------------------------------ tuner plugin configuration
def _read_config(path):
    """An independent reader of NCCL's example-plugin CSV (ext-tuner/example/README.md)."""
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = next(csv.reader([line]))
        assert len(f) == 10, line
        rows.append(dict(coll=f[0], lo=int(f[1]), hi=int(f[2]), algo=f[3], proto=f[4], ch=int(f[5]),
                         nodes=int(f[6]), ranks=int(f[7]), pipe=int(f[8]), reg=int(f[9])))
    return rows


@pytest.mark.parametrize("topo", [get_preset("dgx-h100"), cluster("dgx-a100", 2)], ids=["h100", "2xa100"])
def test_tuner_config_reads_back_contiguous_and_as_predicted(tmp_path, topo):
    m = NcclModel(NcclMachine.from_topology(topo), env=NcclEnv())
    path = tmp_path / "nccl_tuner.conf"
    write_tuner_config(path, tuner_rows(m), comment="made by a test")
    rows = _read_config(path)
    assert {r["coll"] for r in rows} == {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
    for coll in {r["coll"] for r in rows}:
        mine = [r for r in rows if r["coll"] == coll]
        assert mine[0]["lo"] == 0 and mine[-1]["hi"] == MAX_BYTES
        assert all(a["hi"] + 1 == b["lo"] for a, b in zip(mine, mine[1:]))
        for r in mine:
            assert r["algo"] in ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
            assert r["proto"] in ("ll", "ll128", "simple")
            assert (r["nodes"], r["ranks"], r["pipe"], r["reg"]) == (m.machine.nodes, m.machine.ranks, -1, -1)
            probe = 64                                 # a size the model was asked at, inside the range
            while probe < r["lo"]:
                probe *= 2
            assert probe <= r["hi"] + (r["hi"] == MAX_BYTES)   # 4 GiB is one past the plugin's maximum
            fastest = m.fastest(coll, probe)
            assert (fastest.algorithm, fastest.protocol.lower()) == (r["algo"], r["proto"])
