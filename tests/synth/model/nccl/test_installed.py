"""Which NCCL the model follows: the version a user names, and the one a machine has installed
(asked through NCCL's own ``ncclGetVersion``: a real shared library built here stands for it)."""

import shutil
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from synth.model.nccl.installed import OLDEST, installed_nccl_version, parse_nccl_version, version_from_code
from topo_probe.errors import UsageError


def _code(major: int, minor: int, patch: int) -> int:
    """nccl.h.in's NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 (v2.9.6-1)."""
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


@pytest.mark.parametrize("text,want", [("2.21", (2, 21)), ("2.21.5", (2, 21)), ("v2.21.5-1", (2, 21)),
                                       (" 2.8.4 ", (2, 8)), ("2.4", (2, 4)), ("2.31.0", (2, 31))])
def test_the_forms_users_and_release_tags_write(text, want):
    assert parse_nccl_version(text) == want


@pytest.mark.parametrize("text,needle", [("2.x", "not an NCCL version"), ("", "not an NCCL version"),
                                         ("2.21.5.7", "not an NCCL version"), ("2.3", "from 2.4 on"),
                                         ("3.0", "from 2.4 on"), ("1.9", "from 2.4 on")])
def test_anything_else_is_one_line_naming_the_option(text, needle):
    with pytest.raises(UsageError) as e:
        parse_nccl_version(text, "--nccl-version")
    assert needle in str(e.value) and str(e.value).startswith("--nccl-version") and "\n" not in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_a_hostile_string_is_a_version_or_a_usage_error(text):
    try:
        major, minor = parse_nccl_version(text)
    except UsageError:
        return
    assert major == 2 and (major, minor) >= OLDEST


@settings(max_examples=200, deadline=None)
@given(st.integers(4, 40), st.integers(0, 99))
def test_both_encodings_of_the_version_code_decode(minor, patch):
    assert version_from_code(_code(2, minor, patch)) == (2, minor, patch)


def test_no_library_no_version():
    assert installed_nccl_version(("libnccl-not-here.so.2",)) is None


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build a stand-in libnccl")
@pytest.mark.parametrize("code,want", [(22105, (2, 21, 5)), (2804, (2, 8, 4))])
def test_the_installed_library_is_asked_through_ncclGetVersion(tmp_path, code, want):
    src = tmp_path / "nccl.c"
    src.write_text(f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n")
    lib = tmp_path / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    broken = tmp_path / "libbroken.so"
    (tmp_path / "b.c").write_text("int other(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(broken), str(tmp_path / "b.c")], check=True)
    assert installed_nccl_version((str(broken), str(lib))) == want      # a library without the call is skipped
