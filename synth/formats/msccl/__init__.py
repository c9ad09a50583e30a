"""MSCCL XML algorithms (what the msccl runtimes and RCCL load): writer and reader of schedules."""

from synth.formats.msccl.reader import from_msccl_xml
from synth.formats.msccl.writer import to_msccl_xml

__all__ = ["from_msccl_xml", "to_msccl_xml"]
