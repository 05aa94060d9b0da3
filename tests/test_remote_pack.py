"""What `submit --remote` copies (hpclaunch/runs/remote_pack.py): git's files or the whole folder, never
.git or the runs folder; the content address; the tar stream. Local only: no ssh, no cluster."""
import io
import os
import shutil
import subprocess
import tarfile
import threading

import pytest

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.runs.remote_pack import collect, project_root, write_tar

BIG = 1 << 30


def git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    (r / "src" / "train.py").write_text("print('train')\n")
    (r / "run.sh").write_text("#!/bin/sh\n")
    (r / "run.sh").chmod(0o755)
    (r / ".gitignore").write_text("*.ckpt\ndata/\n")
    git(r, "init", "-q")
    git(r, "add", ".")
    git(r, "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "init")
    (r / "notes.txt").write_text("untracked, not ignored\n")
    (r / "model.ckpt").write_text("ignored\n")
    (r / "data").mkdir()
    (r / "data" / "big.csv").write_text("ignored folder\n")
    (r / "runs" / "j-1").mkdir(parents=True)
    (r / "runs" / "j-1" / "rank0.log").write_text("a local run's output\n")
    os.symlink("src/train.py", r / "link.py")
    return r


def paths(pkg):
    return {e.path: e.kind for e in pkg.entries}


def test_a_repository_ships_tracked_and_untracked_files_git_does_not_ignore(repo):
    root, is_git = project_root(str(repo / "src"))      # from a subfolder: the whole repository
    assert (root, is_git) == (str(repo), True)
    pkg = collect(root, True, ["runs"], BIG, "p.yaml")
    assert paths(pkg) == {".gitignore": "f", "src/train.py": "f", "run.sh": "x", "notes.txt": "f", "link.py": "l"}
    assert pkg.size == sum(os.path.getsize(repo / p) for p in (".gitignore", "src/train.py", "run.sh", "notes.txt"))
    assert pkg.slug.startswith("repo-") and len(pkg.slug) == len("repo-") + 24


def test_a_plain_folder_ships_everything_but_git_and_runs(tmp_path):
    folder = tmp_path / "my project!"
    (folder / "runs" / "x").mkdir(parents=True)
    (folder / "runs" / "x" / "out").write_text("o")
    (folder / "a").mkdir()
    (folder / "a" / "b.txt").write_text("b")
    (folder / "c.txt").write_text("c")
    assert project_root(str(folder)) == (str(folder), False)
    pkg = collect(str(folder), False, ["runs"], BIG, "p.yaml")
    assert paths(pkg) == {"a/b.txt": "f", "c.txt": "f"}
    assert pkg.slug.startswith("my-project-")   # a name the remote shell and a human can read


def test_the_address_follows_content_mode_and_names_only(repo):
    first = collect(str(repo), True, ["runs"], BIG, "p").digest
    assert collect(str(repo), True, ["runs"], BIG, "p").digest == first
    (repo / "runs" / "j-2").mkdir()                     # a new local run: same address
    (repo / "model.ckpt").write_text("retrained\n")     # an ignored file: same address
    assert collect(str(repo), True, ["runs"], BIG, "p").digest == first
    (repo / "notes.txt").write_text("edited\n")
    edited = collect(str(repo), True, ["runs"], BIG, "p").digest
    assert edited != first
    (repo / "notes.txt").chmod(0o755)
    assert collect(str(repo), True, ["runs"], BIG, "p").digest not in (first, edited)
    (repo / "notes.txt").chmod(0o644)
    os.rename(repo / "notes.txt", repo / "notes2.txt")
    assert collect(str(repo), True, ["runs"], BIG, "p").digest not in (first, edited)


def test_the_size_limit_names_the_biggest_parts_and_the_setting(repo):
    (repo / "weights").mkdir()
    (repo / "weights" / "w.bin").write_bytes(b"\0" * 300_000)
    with pytest.raises(HpclaunchError) as e:
        collect(str(repo), True, ["runs"], 100_000, "hpc_profiles/far.yaml")
    text = str(e.value)
    assert "\n" not in text and "more than remote.max_upload (97.7 KiB, hpc_profiles/far.yaml)" in text, text
    assert "biggest: weights/ 293.0 KiB" in text and ".gitignore" in text, text


def test_the_tar_stream_unpacks_to_the_files_with_their_modes(repo, tmp_path):
    pkg = collect(str(repo), True, ["runs"], BIG, "p")
    out = io.BytesIO()
    sent = write_tar(pkg, out)
    assert sent == len(out.getvalue()) > 0
    dest = tmp_path / "unpacked"
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:gz") as tar:
        tar.extractall(dest, filter="tar")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir()) == \
        sorted(paths(pkg))
    assert (dest / "src" / "train.py").read_text() == "print('train')\n"
    assert os.stat(dest / "run.sh").st_mode & 0o111 and not os.stat(dest / "notes.txt").st_mode & 0o111
    assert os.readlink(dest / "link.py") == "src/train.py"
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:gz") as tar:
        assert {(m.uid, m.gid, m.uname) for m in tar.getmembers()} == {(0, 0, "")}   # nothing of this machine


def test_a_file_that_changes_after_hashing_stops_the_copy(repo):
    pkg = collect(str(repo), True, ["runs"], BIG, "p")
    (repo / "notes.txt").write_text("written meanwhile\n")   # same path, other content (or size)
    with pytest.raises(HpclaunchError, match="notes.txt: changed while it was being copied"):
        write_tar(pkg, io.BytesIO())


# --- links: nothing is read through one (issue 44, item 9) -----------------------------------------

def _swap_for_link(repo, folder, target):
    shutil.rmtree(repo / folder)
    os.symlink(target, repo / folder)


def test_a_tracked_folder_that_is_now_a_link_out_of_the_project_is_refused(repo, tmp_path):
    # git still lists src/train.py (its index), but src is a link now: the file read would be outside.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.py").write_text("someone else's file\n")
    _swap_for_link(repo, "src", outside)
    with pytest.raises(HpclaunchError) as e:
        collect(str(repo), True, ["runs"], BIG, "p")
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{repo}/src/train.py: git lists it, but src on its path is a "
                                                f"symbolic link (to {outside})"), text
    assert "git rm -r --cached src" in text, text


def test_a_tracked_folder_that_is_now_a_link_inside_the_project_is_refused_too(repo):
    (repo / "lib").mkdir()
    (repo / "lib" / "train.py").write_text("print('train')\n")
    _swap_for_link(repo, "src", "lib")
    with pytest.raises(HpclaunchError, match="src on its path is a symbolic link"):
        collect(str(repo), True, ["runs"], BIG, "p")


def test_a_folder_swapped_for_a_link_after_hashing_is_not_read_through(repo, tmp_path):
    # Same content outside: the digest would match, so only not following the link keeps it out.
    pkg = collect(str(repo), True, ["runs"], BIG, "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.py").write_text("print('train')\n")
    _swap_for_link(repo, "src", outside)
    with pytest.raises(HpclaunchError, match="src/train.py: changed while it was being copied"):
        write_tar(pkg, io.BytesIO())


def test_a_file_swapped_for_a_fifo_after_hashing_stops_the_copy_at_once(repo):
    pkg = collect(str(repo), True, ["runs"], BIG, "p")
    os.unlink(repo / "notes.txt")
    os.mkfifo(repo / "notes.txt")
    failed = []

    def copy():
        try:
            write_tar(pkg, io.BytesIO())
        except HpclaunchError as e:
            failed.append(str(e))
    worker = threading.Thread(target=copy, daemon=True)
    worker.start()
    worker.join(10)
    hung = worker.is_alive()
    if hung:   # a blocking open waits for a writer: be that writer, so the test ends
        with open(repo / "notes.txt", "wb"):
            pass
        worker.join(10)
    assert not hung and failed and "notes.txt: changed while it was being copied" in failed[0], failed
