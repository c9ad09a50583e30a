"""NCCL and RCCL as they run: their tuner's algorithm, protocol and channel choice and its time."""

from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine, arch_of_gpu_name
from synth.model.nccl.params import DEFAULT_PARAMS, ModelParams
from synth.model.nccl.tuner import NcclChoice, NcclModel

__all__ = ["NcclModel", "NcclChoice", "NcclMachine", "NcclEnv", "ModelParams", "DEFAULT_PARAMS", "arch_of_gpu_name"]
