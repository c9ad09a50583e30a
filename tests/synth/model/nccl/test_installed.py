"""Which NCCL the model follows: the version a user names, and the one a machine has installed
(asked through NCCL's own ``ncclGetVersion``: a real shared library built here stands for it)."""

import shutil
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from synth.model.nccl.installed import (OLDEST, installed_nccl_version, parse_nccl_version, resolve_nccl_version,
                                        version_from_code)
from topo_probe.errors import UsageError


def _code(major: int, minor: int, patch: int) -> int:
    """nccl.h.in's NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 (v2.9.6-1)."""
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


@pytest.mark.parametrize("text,want", [("2.21", (2, 21)), ("2.21.5", (2, 21, 5)), ("v2.21.5-1", (2, 21, 5)),
                                       (" 2.8.4 ", (2, 8, 4)), ("2.4", (2, 4)), ("v2.8", (2, 8)),
                                       ("2.31.0", (2, 31, 0)), ("2.28.9", (2, 28, 9)), ("2.28", (2, 28))])
def test_the_forms_users_and_release_tags_write_keep_a_stated_patch(text, want):
    assert parse_nccl_version(text) == want


@pytest.mark.parametrize("named,printed,probed,want", [
    ("2.28.9", (2, 22, 3), False, ((2, 28, 9), "--nccl-version")),
    ("2.28", None, False, ((2, 28), "--nccl-version")),
    (None, (2, 28, 9), False, ((2, 28, 9), "the log")),
    (None, None, True, ((2, 28, 9), "installed")),
    (None, None, False, (None, "the model's default"))])
def test_the_resolved_version_keeps_its_patch(named, printed, probed, want, monkeypatch):
    import synth.model.nccl.installed as inst
    monkeypatch.setattr(inst, "installed_nccl_version", lambda *a, **k: (2, 28, 9))
    assert resolve_nccl_version(named, printed, probed) == want


def test_an_installed_nccl_older_than_the_rules_is_checked_on_its_minor(monkeypatch):
    import synth.model.nccl.installed as inst
    monkeypatch.setattr(inst, "installed_nccl_version", lambda *a, **k: (2, 3, 13))
    assert resolve_nccl_version(None, None, True) == (None, "the model's default")
    monkeypatch.setattr(inst, "installed_nccl_version", lambda *a, **k: (2, 4, 2))
    assert resolve_nccl_version(None, None, True) == ((2, 4, 2), "installed")


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
        version = parse_nccl_version(text)
    except UsageError:
        return
    assert len(version) in (2, 3) and version[0] == 2 and version[:2] >= OLDEST


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
