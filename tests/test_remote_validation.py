"""A profile's `remote:` section and `submit --remote` refusing bad input before any ssh: one line naming
the file, the field, the value and the fix; exit 2; nothing copied, nothing recorded."""
import json
import os
import shutil
import subprocess

import pytest

GOOD_REMOTE = {"host": "me@login.example.org", "code_root": "/shared/me/code"}


def _profile(write, remote_yaml: str, name: str = "r") -> str:
    return write(f"hpc_profiles/{name}.yaml", f"name: {name}\nextends: local\nnode: {{cpus: 2}}\n{remote_yaml}")


def _validate(run_cli, write, remote_yaml):
    _profile(write, remote_yaml)
    job = write("job.yaml", "name: j\nprofile: hpc_profiles/r.yaml\ncommand: [python, train.py]\n")
    code, out, err = run_cli("validate", job)
    return code, err.strip().splitlines()


def _remote(**fields):
    data = dict(GOOD_REMOTE, **fields)
    return "remote: " + json.dumps({k: v for k, v in data.items() if v is not None}) + "\n"


def test_a_good_remote_section_validates(run_cli, write):
    code, lines = _validate(run_cli, write, _remote(port=2222, env={"SLURM_CONF": "/etc/slurm/x.conf"},
                                                     ssh_options={"IdentityFile": "/home/me/.ssh/id cluster",
                                                                  "ProxyJump": "bastion"},
                                                     command=["/shared/venv/bin/hpclaunch"], runs_root="/scratch/runs",
                                                     max_upload="1G"))
    assert code == 0 and lines == [], lines


@pytest.mark.parametrize("fields,path,words", [
    ({"host": "-oProxyCommand=touch /tmp/pwned"}, "remote.host", "is not an ssh destination"),
    ({"host": "me@login example"}, "remote.host", "is not an ssh destination"),
    ({"code_root": "~/code"}, "remote.code_root", "is not expanded here"),
    ({"code_root": "a\nb"}, "remote.code_root", "one line of printable text"),
    ({"code_root": "x" * 2000}, "remote.code_root", "longer than 1024 characters"),
    ({"code_root": None}, "remote.code_root", "is required"),
    ({"command": []}, "remote.command", "must name the hpclaunch command"),
    ({"command": ["--version"]}, "remote.command", "starts with an option"),
    ({"command": ["hpc\x07launch"]}, "remote.command", "one line of printable text"),
    ({"port": 70000}, "remote.port", "must be at most 65535"),
    ({"connect_timeout": 0}, "remote.connect_timeout", "must be at least 1"),
    ({"env": {"BAD NAME": "x"}}, "remote.env.BAD NAME", "is not a valid environment variable name"),
    ({"env": {"API_TOKEN": "x"}}, "remote.env.API_TOKEN", "looks like a secret"),
    ({"env": {"A": "x\ny"}}, "remote.env.A", "one line of printable text"),
    ({"env": {f"V{i}": "x" for i in range(65)}}, "remote.env", "at most 64"),
    ({"ssh_options": {"ControlPath": "/tmp/x"}}, "remote.ssh_options.ControlPath", "cannot be set in a profile"),
    ({"ssh_options": {"StrictHostKeyChecking": "no"}}, "remote.ssh_options.StrictHostKeyChecking",
     "never accepts an unknown host key"),
    ({"ssh_options": {"proxycommand": "nc %h %p"}}, "remote.ssh_options.proxycommand", "use ProxyJump"),
    ({"ssh_options": {"RequestTTY": "yes"}}, "remote.ssh_options.RequestTTY", "cannot be set in a profile"),
    ({"ssh_options": {"Bad-Option": "x"}}, "remote.ssh_options.Bad-Option", "is not an ssh option name"),
    ({"ssh_options": {"IdentityFile": 'a"b'}}, "remote.ssh_options.IdentityFile", "no %-tokens, $ variables, quotes"),
    ({"ssh_options": {"IdentityFile": "/a", "identityfile": "/b"}}, "remote.ssh_options.identityfile",
     "sets the same ssh option as IdentityFile"),
    ({"ssh_options": {"IdentityFile": "a\rb"}}, "remote.ssh_options.IdentityFile", "one line of printable text"),
    ({"max_upload": "lots"}, "remote.max_upload", "is not a size"),
    ({"max_upload": "0"}, "remote.max_upload", "must be more than 0"),
    ({"max_upload": "65G"}, "remote.max_upload", "at most 64G"),
    ({"runs_root": "my runs"}, "remote.runs_root", "is not a plain path"),
    ({"hots": "x"}, "remote.hots", "did you mean 'host'"),
])
def test_bad_remote_fields(run_cli, write, fields, path, words):
    code, lines = _validate(run_cli, write, _remote(**fields))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].split(": ", 1)[0].endswith("hpc_profiles/r.yaml") and f"r.yaml: {path}: " in lines[0], lines[0]
    assert words in lines[0] and "\u2014" in lines[0], lines[0]


def test_a_bad_remote_section_names_the_profile_that_set_it(run_cli, write):
    # The remote: section comes from the parent profile: the error names the parent's file.
    _profile(write, _remote(host="-x"), name="base")
    write("hpc_profiles/child.yaml", "name: child\nextends: base.yaml\nnode: {cpus: 2}\n")
    job = write("job.yaml", "name: j\nprofile: hpc_profiles/child.yaml\ncommand: [python, train.py]\n")
    code, out, err = run_cli("validate", job)
    assert code == 2 and "hpc_profiles/base.yaml: remote.host: is not an ssh destination" in err, err


def test_the_profile_schema_has_the_remote_section(run_cli):
    code, out, _ = run_cli("schema", "--profile")
    remote = json.loads(out)["properties"]["remote"]["anyOf"][0]
    assert code == 0 and remote["required"] == ["host", "code_root"]
    assert {"host", "code_root", "command", "port", "env", "ssh_options", "connect_timeout", "max_upload",
            "runs_root"} == set(remote["properties"])


# --- submit --remote: what is refused before ssh is started ---------------------------------------

JOB = "name: j\nprofile: testcluster\nlauncher: srun\ncommand: [hostname]\n"


@pytest.fixture
def project(tmp_path, monkeypatch, hpc_home):
    folder = tmp_path / "proj"
    (folder / "hpc_profiles").mkdir(parents=True)
    (folder / "job.yaml").write_text(JOB)
    (folder / "hpc_profiles" / "far.yaml").write_text(
        "name: far\nextends: testcluster\nremote: {host: nobody@login.invalid, code_root: /nonexistent/code, "
        "max_upload: 4K}\n")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", str(tmp_path / "no-ssh"))   # had anything reached ssh, this would say so
    return folder


def _submit(run_cli, *args):
    code, out, err = run_cli("submit", *args)
    return code, out, err.strip().splitlines()


def test_a_profile_without_a_remote_section(run_cli, project):
    code, out, lines = _submit(run_cli, "job.yaml", "--remote")
    assert code == 2 and len(lines) == 1 and out == ""
    assert "profile 'testcluster' has no remote: section" in lines[0] and "--remote NAME" in lines[0], lines


def test_remote_before_the_job_file_reads_as_the_job_file(run_cli, project):
    # `submit --remote job.yaml`: NAME is optional, so job.yaml is the job, and the job's profile the remote
    code, out, lines = _submit(run_cli, "--remote", "job.yaml")
    assert code == 2 and len(lines) == 1 and out == ""
    assert "profile 'testcluster' has no remote: section" in lines[0], lines


def test_submit_without_a_job_file_says_which_is_missing(run_cli, project):
    code, out, lines = _submit(run_cli, "--remote", "far")
    assert code == 2 and len(lines) == 1 and out == ""
    assert lines[0].startswith("submit: which job file?") and "--remote [NAME]" in lines[0], lines


def test_an_unknown_remote(run_cli, project):
    code, _, lines = _submit(run_cli, "job.yaml", "--remote", "fra")
    assert code == 2 and len(lines) == 1 and "profile 'fra' not found" in lines[0] and "did you mean 'far'" in lines[0]


def test_a_job_file_outside_the_copied_folder(run_cli, project, tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(JOB)
    code, _, lines = _submit(run_cli, str(outside), "--remote", "far")
    assert code == 2 and len(lines) == 1 and "outside the folder that is copied" in lines[0], lines


def test_a_job_file_git_ignores(run_cli, project, tmp_path, monkeypatch):
    subprocess.run([shutil.which("git", path="/usr/bin:/bin"), "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("job.yaml\n")
    (tmp_path / "git-only").mkdir()
    os.symlink(shutil.which("git", path="/usr/bin:/bin"), tmp_path / "git-only" / "git")
    monkeypatch.setenv("PATH", str(tmp_path / "git-only"))   # git, and still no ssh
    code, _, lines = _submit(run_cli, "job.yaml", "--remote", "far")
    assert code == 2 and len(lines) == 1 and "not among the files copied" in lines[0], lines


def test_a_tracked_folder_that_became_a_link_is_refused_before_ssh(run_cli, project, tmp_path, monkeypatch):
    # issue 44, item 9: git's index lists src/train.py, src is now a link out of the project.
    git = shutil.which("git", path="/usr/bin:/bin")
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text("print('train')\n")
    subprocess.run([git, "init", "-q", str(project)], check=True)
    subprocess.run([git, "-C", str(project), "add", "."], check=True)
    shutil.rmtree(project / "src")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "train.py").write_text("someone else's\n")
    os.symlink(tmp_path / "outside", project / "src")
    (tmp_path / "git-only").mkdir()
    os.symlink(git, tmp_path / "git-only" / "git")
    monkeypatch.setenv("PATH", str(tmp_path / "git-only"))   # git, and still no ssh
    code, out, lines = _submit(run_cli, "job.yaml", "--remote", "far")
    assert code == 2 and len(lines) == 1 and out == "", lines
    assert "src/train.py: git lists it, but src on its path is a symbolic link" in lines[0], lines


def test_a_project_over_the_size_limit(run_cli, project):
    (project / "data.bin").write_bytes(b"x" * 8192)
    code, _, lines = _submit(run_cli, "job.yaml", "--remote", "far")
    assert code == 2 and len(lines) == 1, lines
    assert "more than remote.max_upload (4.0 KiB, hpc_profiles/far.yaml)" in lines[0], lines
    assert "biggest: data.bin 8.0 KiB" in lines[0] and "raise remote.max_upload" in lines[0], lines


def test_a_control_character_in_an_override_is_refused_before_ssh(run_cli, project):
    code, _, lines = _submit(run_cli, "job.yaml", "--remote", "far", "-o", "name=a\x1b[2Jb")
    assert code == 2 and len(lines) == 1 and "one line of printable text" in lines[0], lines


def test_without_ssh_installed_the_error_says_so(run_cli, project):
    code, _, lines = _submit(run_cli, "job.yaml", "--remote", "far")
    assert code == 76 and len(lines) == 1 and "ssh is not installed here" in lines[0], lines


@pytest.mark.parametrize("doc", ["docs/remote.md", "README.md"])
def test_the_example_profile_in_the_docs_is_valid(write, doc):
    import re
    from hpclaunch.spec.profiles import load_profile
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), doc)
    [example] = [b for b in re.findall(r"```yaml\n(.*?)```", open(path, encoding="utf-8").read(), re.S)
                 if b.startswith("name: mycluster")]
    remote = load_profile(write("hpc_profiles/mycluster.yaml", example)).profile.remote
    assert remote.host == "me@login.cluster.org" and remote.code_root == "/shared/me/hpclaunch-code"


@pytest.mark.parametrize("cut", [0, 1, 5, 27, 28])
def test_the_exit_255_mark_is_taken_out_wherever_a_chunk_ends(cut):
    from hpclaunch.runs.remote_ssh import EXIT_255_MARK, _Exit255Mark
    mark = _Exit255Mark()
    text = "warning: x\n" + EXIT_255_MARK
    head, tail = text[:len("warning: x\n") + cut], text[len("warning: x\n") + cut:]
    passed = mark(head) + mark(tail) + mark("", final=True)
    assert passed == "warning: x\n" and mark.seen
    plain = _Exit255Mark()   # a stray record separator is passed on, at the end at the latest
    assert plain("a\x1e") + plain("", final=True) == "a\x1e" and not plain.seen
