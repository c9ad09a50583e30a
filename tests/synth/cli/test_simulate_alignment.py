"""``simulate`` sizes a divided collective as nccl-tests does: whole 16-byte blocks per rank, so no
block is ever misaligned (NVIDIA/nccl-tests v2.19.6 src/reduce_scatter.cu line 11,
``(count/nranks) & ~(16/eltSize - 1)``)."""

from synth.cli import simulate


def _rows(capsys, argv):
    assert simulate.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [ln for ln in out if ln.startswith("# alignment:")]
    return [ln.split()[:2] for ln in out if ln.strip() and not ln.startswith("#")]


def test_twelve_rank_reduce_scatter_rounds_each_rank_down_to_16_bytes(capsys):
    """12 ranks, float: 1 KiB = 256 floats / 12 = 21, & ~3 = 20 per rank, size 20 x 12 x 4 = 960; 1 MiB =
    262144 / 12 = 21845, & ~3 = 21844, size 1048512 (worked by hand from the line above)."""
    rows = _rows(capsys, ["--topology", "dgx2", "--gpus", "0-11", "--baseline", "nccl", "--collective",
                          "reducescatter", "-b", "1K", "-e", "1M", "-f", "1024"])
    assert rows == [["960", "20"], ["1048512", "21844"]]
