"""How a hierarchical allgather splits a block between the network and the host's own links.

The plain hierarchy (:mod:`synth.solve.cluster.compose`) sends each block over the network once
per host (to the same local GPU of every other host) and then over the host's links to the
other ``g - 1`` GPUs.  Its two terms (rounds per block) are the network's ``a`` and the host
links' ``b``.  From 5 DGX H100 hosts on, ``a >= b`` and the hierarchy meets the host cut; on 2-4
hosts the host links are the busier (2 x dgx-h100: ``a = 1/2``, ``b = 7/9``), and the best
schedules relieve them by sending some pieces over the network to more than one GPU per host.

With a block cut into ``C`` pieces and every GPU *carrying* ``e`` pieces of other local GPUs'
blocks besides its own block (it forwards them along its rail after the host has shared them,
and on every other host the GPU of its rail gets them from the network instead of its host
links), a fraction ``f = e / C`` of the host-link work moves to the network:

    network  a * (1 + f)        host links  b - c * f,   c = b * (H - 1) / (H * (g - 1))

(``c``: each carried piece spares one of the ``H (g - 1)`` host-link arrivals per GPU and
block, on ``H - 1`` hosts).  :func:`best_split` picks the ``(C, e)`` whose larger term is
smallest; the schedule built with it is measured before it is kept.
"""

from __future__ import annotations

from fractions import Fraction

#: largest number of pieces per block the split considers
MAX_PIECES = 16


def predicted_term(a: Fraction, b: Fraction, c: Fraction, pieces: int, carried: int) -> Fraction:
    """The larger of the two terms (rounds per block) with ``carried`` of ``pieces`` moved.

    >>> predicted_term(Fraction(1, 2), Fraction(7, 9), Fraction(1, 18), 2, 1)
    Fraction(3, 4)
    """
    f = Fraction(carried, pieces)
    return max(a * (1 + f), b - c * f)


def best_split(a: Fraction, b: Fraction, hosts: int, gpus_per_host: int,
               max_pieces: int = MAX_PIECES) -> tuple[int, int]:
    """``(pieces per block C, carried pieces per GPU e)`` with the smallest predicted term
    (fewest pieces, then fewest carried, on ties); ``(1, 0)`` where the network is already the
    busier or there is nothing to move (one GPU per host, one host).

    >>> best_split(Fraction(1, 2), Fraction(7, 9), 2, 8)      # 2 x dgx-h100: half a piece each
    (2, 1)
    >>> best_split(Fraction(2), Fraction(35, 18), 5, 8)       # 5 hosts: the network is the busier
    (1, 0)
    """
    g, H = gpus_per_host, hosts
    if a >= b or g < 2 or H < 2:
        return 1, 0
    c = b * (H - 1) / (H * (g - 1))
    best = (predicted_term(a, b, c, 1, 0), 1, 0)
    for pieces in range(1, max_pieces + 1):
        for carried in range(0, g):                 # distinct carriers per block: at most g - 1
            best = min(best, (predicted_term(a, b, c, pieces, carried), pieces, carried))
    return best[1], best[2]


__all__ = ["MAX_PIECES", "best_split", "predicted_term"]
