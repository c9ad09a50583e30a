"""``simulate`` names the sizes whose per-rank blocks NCCL cannot copy with 16-byte loads."""

from synth.cli import simulate


def _alignment(capsys, argv):
    assert simulate.main(argv) == 0
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# alignment:")]


def test_misaligned_per_rank_blocks_are_named_not_silently_timed(capsys):
    """nccl-tests' per-rank count is size / ranks / 4 rounded down: on 12 ranks a power-of-two size
    never gives a multiple of 16 bytes (2^k / 48 is not whole), on 8 ranks from 128 B on it always does."""
    twelve = _alignment(capsys, ["--topology", "dgx2", "--gpus", "0-11", "--baseline", "nccl", "--collective",
                                 "reducescatter", "-b", "1K", "-e", "1G", "-f", "2"])
    sizes = [1 << k for k in range(10, 31)]
    odd = [n for n in sizes if (n // 12 // 4 * 4) % 16]
    assert len(odd) == len(sizes) and twelve and f"at {len(odd)} of {len(sizes)} sizes (first 1024 B)" in twelve[0]
    assert not _alignment(capsys, ["--topology", "dgx-h100", "--baseline", "nccl", "--collective", "allgather",
                                   "-b", "1K", "-e", "1G", "-f", "2"])
    assert not _alignment(capsys, ["--topology", "dgx2", "--gpus", "0-11", "--baseline", "nccl", "--collective",
                                   "allreduce", "-b", "1K", "-e", "1G", "-f", "2"])   # one block: nothing split
