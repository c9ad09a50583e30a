"""kernels.comm.compression_casts: format lookup, payload sizes by hand, the fp8 payload layout,
range errors and the device-seam registry (the collectives are tested in test_compression)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernels.comm import compression
from kernels.comm import compression_casts as cc
from topo_probe.errors import InvalidArgument


def test_format_names_and_aliases():
    assert cc.get_format("E4M3") is cc.FORMATS["fp8"] and cc.get_format("bfloat16").name == "bf16"
    assert (cc.FORMATS["fp16"].u, cc.FORMATS["bf16"].u, cc.FORMATS["fp8"].u) == (2 ** -11, 2 ** -8, 2 ** -4)
    with pytest.raises(InvalidArgument, match=r"^get_format: compression must be one of fp16, bf16, fp8; got 'fp4'$"):
        cc.get_format("fp4")
    with pytest.raises(InvalidArgument, match=r"^payload: compression must be one of fp16, bf16, fp8; got 'fp4'$"):
        cc.get_format("fp4", "payload")


@pytest.mark.parametrize("fmt, b, gs, want", [
    ("fp16", 10, None, 20), ("bf16", 3, None, 8), ("fp16", 0, None, 0),
    ("fp8", 10, 4, 3 * 4 + 12),      # 3 groups of 4: three float32 scales, 10 codes padded to 12
    ("fp8", 512, 512, 4 + 512), ("fp8", 513, 512, 8 + 516), ("fp8", 5, None, 4 + 8),
])
def test_payload_bytes_by_hand(fmt, b, gs, want):
    assert cc.payload_bytes(fmt, b, gs) == want


def test_fp8_payload_layout_scales_then_codes():
    x = np.array([[448.0, -224.0, 1.0, 0.0, 2.0, 4.0]], np.float32)
    p = cc.encode_fp8(x, 4)                       # groups: x[0:4] (max 448), x[4:6] (max 4)
    assert p.shape == (1, 8 + 8)
    assert p[0, :8].view(np.float32).tolist() == [1.0, float(np.float32(4.0) / np.float32(448.0))]  # max / 448
    codes = p[0, 8:14].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert codes.tolist() == [448.0, -224.0, 1.0, 0.0, 224.0, 448.0]
    assert p[0, 14:].tolist() == [0, 0]           # padding to a 4-byte word
    np.testing.assert_allclose(cc.decode_fp8(p, 6, 4), x, rtol=2 ** -4)


def test_fp16_range_and_fp8_nan_errors():
    with pytest.raises(ValueError, match=r"^fp16 compression: max \|x\| = 70000 exceeds 65504; use bf16 or fp8$"):
        cc.encode_fp16(np.array([[70000.0]], np.float32))
    with pytest.raises(ValueError, match=r"^fp8 compression: the input holds inf or NaN$"):
        cc.encode_fp8(np.array([[np.nan, 1.0]], np.float32))


def test_registry_is_shared_with_compression_and_host_kernels_for_numpy():
    assert compression.CAST_KERNELS is cc.CAST_KERNELS and compression.register_cast is cc.register_cast
    enc, dec = cc._kernels("fp8", np.zeros(1))
    assert (enc, dec) == (cc.encode_fp8, cc.decode_fp8)
    old = cc.CAST_KERNELS[("host", "fp16")]
    try:
        cc.register_cast("host", "float16", cc.encode_bf16, cc.decode_bf16)
        assert cc.CAST_KERNELS[("host", "fp16")] == (cc.encode_bf16, cc.decode_bf16)
    finally:
        cc.register_cast("host", "fp16", *old)
