"""Which network an nccl-tests run used, from the NCCL INFO lines of its log (``NCCL_DEBUG=INFO``).

NCCL names its network transport when it starts (``NCCL INFO Using network IB``), and each
transport lists what it uses:

* InfiniBand / RoCE: ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ... ; OOB eth0:...`` (RoCE
  ports end in ``/RoCE``);
* sockets: ``NET/Socket : Using [0]eth0:10.0.0.1<0> ...``;
* AWS EFA through the aws-ofi-nccl plugin: ``NET/OFI ...`` lines, among them the instance type
  (``Running on p5.48xlarge platform``) and the libfabric provider
  (``Selected Provider is efa``); p5-class instances (p5, p5e, p5en, p6) carry the second EFA
  generation (``efa2``), earlier ones (p4d, p4de) the first (``efa``);
* Google's GPUDirect-TCPX(O) plugins: ``NET/FasTrak`` or ``NET/GPUDirectTCPX`` lines
  (``tcpxo``).

:func:`network_of` turns these into one of :data:`synth.model.nccl.machine.NET_KINDS` and the
number of NICs listed, or None when the log does not say (nccl-tests prints no INFO lines
unless asked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: longest line read (NCCL's INFO lines are far shorter; the patterns below scan each line)
MAX_LINE = 4096
_USING = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_IB = re.compile(r"NET/IB\s*:\s*Using\s+(.*)")
_SOCKET = re.compile(r"NET/Socket\s*:\s*Using\s+(.*)")
_PORT = re.compile(r"\[\d{1,3}\]\S+")
_PLATFORM = re.compile(r"NET/OFI.*?\b(p\d{1,2}[a-z]{0,3})\.\d{0,2}x?large\b", re.I)
_PROVIDER = re.compile(r"NET/OFI.*?Selected [Pp]rovider is (\w+)")
_OFI_NICS = re.compile(r"NET/OFI.*?found (\d{1,3}) nics?")
_TCPX = re.compile(r"NET/(?:FasTrak|GPUDirectTCPX)\b", re.I)


@dataclass(frozen=True)
class Network:
    """What a log says of its network: ``kind`` (a ``NET_KINDS`` name) and ``nics`` (the NICs
    one process listed, None when it listed none); ``evidence`` is the line that decided."""

    kind: str
    nics: int | None
    evidence: str


def _efa_generation(platform: str | None) -> str:
    """``efa2`` for p5-class instances (p5, p5e, p5en, p6 and later), else ``efa``."""
    m = re.match(r"p(\d+)", platform or "", re.I)
    return "efa2" if m and int(m.group(1)) >= 5 else "efa"


def network_of(lines) -> Network | None:
    """The network of a log's NCCL INFO ``lines`` (see the module docstring), None if unsaid.

    >>> network_of(["h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB eth0:10.0.0.1<0>"])
    Network(kind='ib', nics=2, evidence='NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB eth0:10.0.0.1<0>')
    >>> network_of(["NCCL INFO NET/OFI Running on p4de.24xlarge platform",
    ...             "NCCL INFO NET/OFI Selected Provider is efa, fabric is efa (found 4 nics)"]).kind
    'efa'
    >>> network_of(["# nThread 1 nGpus 8 minBytes 8"]) is None
    True
    """
    using = ib = socket = platform = provider = tcpx = None
    ofi_nics = None
    for line in lines:
        if len(line) > MAX_LINE or ("NCCL INFO" not in line and "NET/" not in line):
            continue        # real INFO lines are short: a long one is not one (and would cost time)
        if (m := _USING.search(line)) and using is None:
            using = m.group(1)
        if (m := _IB.search(line)) and ib is None:
            ib = m.group(0).strip()
        if (m := _SOCKET.search(line)) and socket is None:
            socket = m.group(0).strip()
        if (m := _PLATFORM.search(line)) and platform is None:
            platform = m.group(1)
        if (m := _PROVIDER.search(line)) and provider is None:
            provider = m.group(1).lower()
        if (m := _OFI_NICS.search(line)) and ofi_nics is None:
            ofi_nics = int(m.group(1))
        if _TCPX.search(line) and tcpx is None:
            tcpx = line.strip()
    chosen = (using or "").lower()
    ofi = platform is not None or provider is not None or "libfabric" in chosen or "ofi" in chosen
    if "fastrak" in chosen or "tcpx" in chosen or (not using and tcpx):
        return Network("tcpxo", None, using or tcpx)
    if ofi and provider in (None, "efa") and "socket" not in chosen and chosen != "ib":
        kind = _efa_generation(platform)
        return Network(kind, ofi_nics, f"NET/OFI platform {platform or '?'}, provider {provider or '?'}")
    if ofi and provider in ("tcp", "sockets", "udp"):
        return Network("socket", ofi_nics, f"NET/OFI provider {provider}")
    if ib and (not using or chosen == "ib"):
        ports = _PORT.findall(ib)
        roce = ports and all(p.endswith("/RoCE") for p in ports)
        return Network("roce" if roce else "ib", len(ports) or None, ib)
    if socket or chosen == "socket":
        return Network("socket", len(_PORT.findall(socket or "")) or None, socket or using)
    if chosen == "ib":
        return Network("ib", None, using)
    return None


__all__ = ["Network", "network_of"]
