"""RCCL's tuning of gfx950 (MI350X / MI355X): ``rcclTuningModel[6]`` (ROCm/rccl src/graph/tuning.cc,
code index file 2336120413, ``tuning_model_6`` from char 20492; selected for gfx950 by rome_models.cc,
file 2196204885), the one-node LL rules of rccl_wrap.cc ``rcclUpdateCollectiveProtocol`` (file
54824299024) and LL128 left off (init.cc sets ``topo->ll128Enabled = false``, file 2254851798).  The
hand-worked numbers are RCCL's own: RCCL 2.26.6 printed the same tuner entries on 8 x MI355X
(Ahalperin/amd-dev 58a032f7 results/scale_8gpu_all_reduce/nccl_debug.log) and ran allreduce of
64 KiB as ring LL, 512 KiB and 4 MiB as ring Simple."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.constants import RCCL_GFX942, RCCL_GFX950
from synth.model.nccl.rccl import gfx950_one_node_protocol, rccl_choose, rccl_tuner_us
from topo_probe import get_preset

MI355X = NcclMachine.from_topology(get_preset("mi355x"))


def _alg_gbs(coll: str, proto: str) -> float:
    """The algorithm bandwidth (GB/s) behind :func:`rccl_tuner_us`: 1 MB over the slope."""
    return 1e6 / (1000.0 * (rccl_tuner_us(MI355X, coll, proto, 10**6) - rccl_tuner_us(MI355X, coll, proto, 0)))


def test_tuning_model_6_tables():
    """The source's one-node rows: hwLat xGMI as model 5, bwRatio ring (0.08, 0.08, 1.00), the one-node LL
    rules, LL broadcast/reduce x 1.65, 48 GB/s xGMI links."""
    c = RCCL_GFX950
    assert c["hw_lat_xgmi"] == RCCL_GFX942["hw_lat_xgmi"]
    assert c["ring_bw_ratio"] == (0.08, 0.08, 1.00)
    assert c["one_node_ll_max"] == {"allgather": 88448, "reducescatter": 1048576}
    assert (c["ll_rooted_factor"], c["xgmi_gbs"]) == (1.65, 48.0)


@pytest.mark.parametrize("coll, ll, simple", [
    # (latency us, algorithm GB/s) per protocol; busBw = 7 links x 48 GB/s = 336
    ("allreduce", (12 + 14 * 0.8, 336 * 0.08 * 8 / 14), (17 + 14 * 2.1, 336 * 8 / 14)),       # 23.2/15.36, 46.4/192
    ("allgather", (12 + 7 * 0.8, 336 * 0.08 * 8 / 7), (17 + 7 * 2.1, 336 * 8 / 7)),           # 17.6/30.72, 31.7/384
    ("reducescatter", (12 + 7 * 0.8, 336 * 0.08 * 8 / 7), (17 + 7 * 2.1, 336 * 8 / 7)),
    ("broadcast", (12 + 0.8, 336 * 0.08 * 1.65), (17 + 2.1, 336.0)),                          # 12.8/44.35, 19.1/336
    ("reduce", (12 + 0.8, 336 * 0.08 * 1.65), (17 + 2.1, 336.0)),
])
def test_tuner_entries_match_rccl_2_26_6(coll, ll, simple):
    """RCCL 2.26.6's printed table on 8 x MI355X: AllReduce 23.2/15.4 and 46.4/192.0, AllGather and
    ReduceScatter 17.6/30.7 and 31.7/384.0, Broadcast and Reduce 12.8/44.4 and 19.1/336.0."""
    for proto, (lat, gbs) in (("LL", ll), ("Simple", simple)):
        assert rccl_tuner_us(MI355X, coll, proto, 0) == pytest.approx(lat)
        assert _alg_gbs(coll, proto) == pytest.approx(gbs)


def test_one_node_allreduce_switches_to_simple_near_378_kib():
    """LL and Simple cross where 23.2 + n/15360 = 46.4 + n/192000 (n in bytes, times in us):
    n = 23200 / (1/15.36 - 1/192) = 387,339 B.  RCCL 2.26.6 ran 64 KiB as LL, 512 KiB as Simple."""
    assert [gfx950_one_node_protocol(MI355X, "allreduce", n) for n in (65536, 387_000, 388_000, 524288)] == \
        ["LL", "LL", "Simple", "Simple"]


def test_one_node_broadcast_crossover_with_the_1_65_factor():
    """Broadcast: 12.8 + n/44352 = 19.1 + n/336000 at n = 6300 / (1/44.352 - 1/336) = 321,910 B."""
    assert [gfx950_one_node_protocol(MI355X, "broadcast", n) for n in (320_000, 324_000)] == ["LL", "Simple"]


def test_one_node_allgather_and_reducescatter_ll_rules():
    """The tuner alone would leave LL at 470,817 B in all (17.6 + n/30720 = 31.7 + n/384000), 58,852 B
    per rank; rcclUpdateCollectiveProtocol keeps LL up to 88,448 B per rank for allgather and 1 MiB per
    rank for reducescatter on one gfx950 node."""
    assert [gfx950_one_node_protocol(MI355X, "allgather", 8 * b) for b in (58_000, 88448, 88449)] == ["LL", "LL", "Simple"]
    assert [gfx950_one_node_protocol(MI355X, "reducescatter", 8 * b) for b in (1 << 20, (1 << 20) + 1)] == ["LL", "Simple"]


def test_model_choice_on_one_mi355x_host():
    """The model's pick on one host follows RCCL's: ring LL, then ring Simple; no LL128, no MSCCL."""
    model = NcclModel(MI355X)
    picks = {n: model.choose("allreduce", n) for n in (65536, 524288, 4 << 20, 8 << 20)}
    assert [(c.algorithm, c.protocol) for c in picks.values()] == \
        [("ring", "LL"), ("ring", "Simple"), ("ring", "Simple"), ("ring", "Simple")]


def test_nccl_proto_still_wins_and_gfx942_is_unchanged():
    """NCCL_PROTO keeps its say on gfx950; MI300X (gfx942, -g 8) still runs tuning model 5's LL range, but its LL128
    band runs Simple on one host (rome model 79 leaves ``ll128Enabled`` off: test_rccl_gfx942_ll128.py)."""
    from synth.model.nccl.env import NcclEnv
    forced = NcclModel(MI355X, env=NcclEnv.from_environ({"NCCL_PROTO": "LL"}))
    assert rccl_choose(forced.table, "allreduce", 4 << 20)[1] == "LL"
    mi300x = NcclModel(NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=8))
    assert [mi300x.choose("allreduce", n).protocol for n in (1 << 20, 2 << 20, 16 << 20)] == ["LL", "Simple", "Simple"]
