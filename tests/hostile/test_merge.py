"""``guidedbp merge-manifests OUT`` on bad shard folders: one line, exit 2, and the
manifest it would replace left byte for byte as it was.

Each folder is built here at test time; the real command runs in-process (click's
runner), except the FIFO case, which runs in a subprocess with a timeout so that a
merge that blocks on the FIFO fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guidedbp.io.shard import ShardError, merge_manifests

from ..helpers import assert_one_line_error, run_cli

# What OUT/manifest.jsonl holds before each refused merge: it must still hold it after.
OLD_MANIFEST = b'{"input": "old.png", "status": "ok", "targets": []}\n'


def line(name: str) -> bytes:
    return json.dumps({"input": name, "status": "ok"}).encode() + b"\n"


def make_out(tmp_path: Path, shards: dict[str, bytes | None]) -> Path:
    """OUT with the old manifest and ``shards``: name -> bytes (a file) or None (a folder)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.jsonl").write_bytes(OLD_MANIFEST)
    for name, data in shards.items():
        if data is None:
            (out / name).mkdir()
        else:
            (out / name).write_bytes(data)
    return out


def assert_refused(out: Path, *fragments: str) -> str:
    """The merge fails with one line holding ``fragments``; OUT is exactly as before."""
    before = {name: (out / name).read_bytes() for name in os.listdir(out)
              if (out / name).is_file()}
    listing = sorted(os.listdir(out))
    message = assert_one_line_error(run_cli("merge-manifests", out), *fragments)
    assert (out / "manifest.jsonl").read_bytes() == OLD_MANIFEST
    assert sorted(os.listdir(out)) == listing  # no temporary file left behind
    assert {name: (out / name).read_bytes() for name in before} == before
    return message


BAD_LINES = {  # shard 1 of 2's bytes -> what the message says about its line 2
    "garbage": (line("a") + b"this is not json\n", "line 2: not JSON (Expecting value"),
    "no input": (line("a") + b'{"status": "ok"}\n', 'line 2: record has no "input"'),
    "array": (line("a") + b"[1, 2]\n", "line 2: a JSON array, expected an object"),
    "number": (line("a") + b"3\n", "line 2: a JSON number, expected an object"),
    "string": (line("a") + b'"x"\n', "line 2: a JSON string, expected an object"),
    "null": (line("a") + b"null\n", "line 2: a JSON null, expected an object"),
    "input not a string": (line("a") + b'{"input": [1]}\n',
                           'line 2: "input" is a JSON array, expected a string'),
    "not utf-8": (line("a") + b'{"input": "\xff.png"}\n',
                  "line 2: not UTF-8 (byte 0xff at column 12)"),
    "latin-1 file": (line("a") + '{"input": "café"}\n'.encode("latin-1"), "line 2: not UTF-8"),
    "truncated": (line("a") + b'{"input": "b", "sta', "line 2: not JSON (Unterminated string"),
    "deep nesting": (line("a") + b"[" * 100_000 + b"\n", "line 2: not JSON"),
    "huge number": (line("a") + b'{"input": "b", "n": ' + b"9" * 5000 + b"}\n",
                    "line 2: not JSON"),
}


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_line_is_named_by_file_and_line(tmp_path, case):
    data, expected = BAD_LINES[case]
    out = make_out(tmp_path, {"manifest-0-of-2.jsonl": line("z"),
                              "manifest-1-of-2.jsonl": data})
    assert_refused(out, f"{out / 'manifest-1-of-2.jsonl'}, {expected}")


def test_blank_lines_count_in_the_line_number(tmp_path):
    out = make_out(tmp_path, {"manifest-0-of-1.jsonl": line("a") + b"\n  \r\n{oops\n"})
    assert_refused(out, "manifest-0-of-1.jsonl, line 4: not JSON")


BAD_FOLDERS = {  # shard files (None: a folder) -> fragments of the message
    "folder named like a shard": (
        {"manifest-0-of-2.jsonl": None, "manifest-1-of-2.jsonl": line("a")},
        ["manifest-0-of-2.jsonl: a folder, expected a shard manifest file"]),
    "N = 0": ({"manifest-0-of-0.jsonl": b""},
              ["manifest-0-of-0.jsonl: N = 0 shards is not a run"]),
    "K = N": ({"manifest-0-of-2.jsonl": line("a"), "manifest-1-of-2.jsonl": line("b"),
               "manifest-2-of-2.jsonl": line("c")},
              ["manifest-2-of-2.jsonl: shard 2 of 2 cannot exist", "below N"]),
    "K > N": ({"manifest-0-of-2.jsonl": line("a"), "manifest-1-of-2.jsonl": line("b"),
               "manifest-3-of-2.jsonl": line("c")},
              ["manifest-3-of-2.jsonl: shard 3 of 2 cannot exist"]),
    "mixed N": ({"manifest-0-of-1.jsonl": line("a"), "manifest-0-of-2.jsonl": line("a"),
                 "manifest-1-of-2.jsonl": line("b")},
                ["shard manifests of different runs", "(of-1, of-2): keep one N"]),
    "missing K": ({"manifest-0-of-3.jsonl": line("a"), "manifest-2-of-3.jsonl": line("c")},
                  ["found shards 0,2 of 3: missing 1", "no manifest-1-of-3.jsonl in"]),
    "all missing but a stray K": ({"manifest-5-of-3.jsonl": b""}, ["shard 5 of 3"]),
    "leading zero": ({"manifest-00-of-1.jsonl": line("a")},
                     ["manifest-00-of-1.jsonl: not a shard manifest name",
                      "guidedbp writes manifest-0-of-1.jsonl"]),
    "an input in two shards": ({"manifest-0-of-2.jsonl": line("a") + line("b"),
                                "manifest-1-of-2.jsonl": line("b")},
                               ["input 'b' appears in shards 0 and 1"]),
    "no shards at all": ({"manifest.jsonl.bak": line("a")}, ["no manifest-K-of-N.jsonl files"]),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_a_bad_shard_folder_is_refused(tmp_path, case):
    shards, fragments = BAD_FOLDERS[case]
    out = make_out(tmp_path, shards)
    assert_refused(out, *fragments)


def test_a_dangling_symlink_named_like_a_shard(tmp_path):
    out = make_out(tmp_path, {"manifest-0-of-2.jsonl": line("a")})
    (out / "manifest-1-of-2.jsonl").symlink_to(tmp_path / "nowhere")
    assert_refused(out, "manifest-1-of-2.jsonl: cannot read it (No such file or directory)")


def test_the_library_raises_shard_error(tmp_path):
    out = make_out(tmp_path, {"manifest-0-of-1.jsonl": b"[1, 2]\n"})
    with pytest.raises(ShardError, match=r"manifest-0-of-1\.jsonl, line 1: a JSON array"):
        merge_manifests(out)
    assert (out / "manifest.jsonl").read_bytes() == OLD_MANIFEST


def test_a_good_merge_replaces_the_old_manifest(tmp_path):
    out = make_out(tmp_path, {"manifest-0-of-2.jsonl": line("b") + b"\n",
                              "manifest-1-of-2.jsonl": line("c") + line("a")})
    result = run_cli("merge-manifests", out, code=0)
    assert result.stderr == (f"3 records from 2 shards -> {out / 'manifest.jsonl'}\n"
                             f"report: {out / 'index.html'} (3 inputs)\n")
    assert (out / "manifest.jsonl").read_bytes() == line("b") + line("c") + line("a")
    assert sorted(os.listdir(out)) == ["index.html", "manifest-0-of-2.jsonl",
                                       "manifest-1-of-2.jsonl", "manifest.jsonl"]


def test_a_symlink_in_the_manifests_place_is_refused_as_explain_refuses_it(tmp_path):
    # Issue 19, item 8: neither the link nor what it points to is replaced.
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(OLD_MANIFEST)
    out = make_out(tmp_path, {"manifest-0-of-1.jsonl": line("a")})
    (out / "manifest.jsonl").unlink()
    (out / "manifest.jsonl").symlink_to(elsewhere)
    assert_one_line_error(run_cli("merge-manifests", out),
                          "manifest.jsonl' is a symbolic link: guidedbp does not write "
                          "through links")
    assert os.readlink(out / "manifest.jsonl") == str(elsewhere)
    assert elsewhere.read_bytes() == OLD_MANIFEST


@pytest.mark.parametrize("mine", [b"my own notes\n", b'{"input": "x"}\n', None])
def test_a_users_own_manifest_is_refused_as_explain_refuses_it(tmp_path, mine):
    out = make_out(tmp_path, {"manifest-0-of-1.jsonl": line("a")})
    (out / "manifest.jsonl").unlink()
    if mine is None:
        (out / "manifest.jsonl").mkdir()  # a folder of the user's by that name
    else:
        (out / "manifest.jsonl").write_bytes(mine)
    assert_one_line_error(run_cli("merge-manifests", out),
                          "manifest.jsonl' exists and is not a guidedbp manifest: refusing "
                          "to overwrite it")
    assert sorted(os.listdir(out)) == ["manifest-0-of-1.jsonl", "manifest.jsonl"]
    if mine is not None:
        assert (out / "manifest.jsonl").read_bytes() == mine


@pytest.mark.parametrize("count", ["100000000", "99999999999999999999"])
def test_the_n_in_a_shards_name_is_bounded_by_the_files_there_are(tmp_path, count):
    # Issue 19, item 8: N was trusted: 10^20 hung the merge, 10^8 took 2.35 GB then exit 3.
    # A subprocess under a 60 s timeout and a 1 GiB address-space limit.
    out = make_out(tmp_path, {f"manifest-0-of-{count}.jsonl": line("a"),
                              f"manifest-7-of-{count}.jsonl": line("b")})
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from guidedbp.cli import main; main(sys.argv[1:], prog_name='guidedbp')")
    done = subprocess.run([sys.executable, "-c", code, "merge-manifests", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    more = int(count) - 2 - 5
    assert done.stderr == (f"Error: found shards 0,7 of {count}: missing 1,2,3,4,5 and {more} "
                           f"more (no manifest-1-of-{count}.jsonl in {out})\n")
    assert (out / "manifest.jsonl").read_bytes() == OLD_MANIFEST


def test_the_merged_manifest_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    # Written under a temporary name and renamed: a failed write leaves the old one.
    out = make_out(tmp_path, {"manifest-0-of-1.jsonl": line("a")})
    calls = []

    def failing_replace(source, target):
        calls.append((os.path.basename(source), os.path.basename(target)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    message = assert_one_line_error(run_cli("merge-manifests", out), "manifest.jsonl: cannot "
                                    "write it (No space left on device)")
    assert "internal error" not in message
    assert calls and calls[0][0].startswith(".manifest.jsonl.") and calls[0][1] == \
        "manifest.jsonl"
    assert (out / "manifest.jsonl").read_bytes() == OLD_MANIFEST
    assert sorted(os.listdir(out)) == ["manifest-0-of-1.jsonl", "manifest.jsonl"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_like_a_shard_does_not_hang(tmp_path):
    out = make_out(tmp_path, {"manifest-0-of-2.jsonl": line("a")})
    os.mkfifo(out / "manifest-1-of-2.jsonl")  # opening it to read would wait for a writer
    done = subprocess.run([sys.executable, "-m", "guidedbp", "merge-manifests", str(out)],
                          capture_output=True, text=True, timeout=60)  # a hang guard
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "manifest-1-of-2.jsonl: not a regular file" in lines[0], lines
    assert (out / "manifest.jsonl").read_bytes() == OLD_MANIFEST
