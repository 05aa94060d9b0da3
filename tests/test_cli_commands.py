"""The small commands: profiles, init, schema, help; and that startup stays light."""
import json
import os
import subprocess
import sys
from hlcli import hl, modules_loaded


def test_profiles_list_and_show(run_cli):
    code, out, _ = run_cli("profiles")
    assert code == 0
    for name in ("a100-hpc", "jetson-orin", "workstation", "local", "testcluster"):
        assert name in out
    code, out, _ = run_cli("profiles", "show", "testcluster")
    assert code == 0 and "extends" in out.splitlines()[0] and "local.yaml" in out.splitlines()[0]
    assert "partitions:\n  - debug" in out


def test_init_writes_a_valid_file_and_refuses_to_clobber(run_cli, tmp_path):
    path = str(tmp_path / "myjob.yaml")
    for profile in ("local", "a100-hpc", "jetson-orin", "workstation", "testcluster"):
        code, out, err = run_cli("init", path, "--profile", profile, "--force")
        assert code == 0, err
        code, out, err = run_cli("validate", path)
        assert code == 0, err
    before = open(path).read()
    code, out, err = run_cli("init", path)
    assert code == 2 and "already exists" in err and open(path).read() == before
    # where the command is written: a snapshot in the submit folder is the previous job's (issue 45)
    above = before.split("\ncommand:")[0]
    assert "resumes the previous job's" in above and "$HPCLAUNCH_RUN_DIR" in above, above


def test_schema_is_json_schema(run_cli):
    code, out, _ = run_cli("schema")
    schema = json.loads(out)
    assert schema["properties"]["launcher"]["enum"] == ["torchrun", "horovod", "mpi", "srun", "ray", "tensorflow",
                                                        "accelerate"]
    assert schema["required"] == ["name", "command"]
    assert schema["properties"]["resources"]["properties"]["nodes"]["minimum"] == 1
    code, out, _ = run_cli("schema", "--profile")
    assert "gpu_request" in json.loads(out)["properties"]


def test_schema_accepts_the_examples(run_cli):
    import jsonschema  # noqa: F401 - only if installed
    import yaml
    code, out, _ = run_cli("schema")
    schema = json.loads(out)
    from jsonschema import Draft202012Validator
    job = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "golden", "job.yaml")))
    Draft202012Validator(schema).validate(job)


def test_render_prints_only_the_script(write):
    path = write("job.yaml", "name: j\ncommand: [python, t.py]\n")
    proc = hl("render", path, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("#!/bin/bash\n") and proc.stderr == ""


def test_nothing_heavy_is_imported():
    heavy = ("torch", "pynvml", "matplotlib", "numpy", "jinja2", "yaml", "rich", "submitit", "pydantic", "psutil")
    assert modules_loaded("from hpclaunch.cli import main; main(['--help'])", heavy) == []


def test_render_imports_nothing_heavy(write):
    path = write("job.yaml", "name: j\ncommand: [python, t.py]\n")
    heavy = ("torch", "pynvml", "matplotlib", "numpy", "rich", "submitit", "pydantic", "psutil")
    assert modules_loaded(f"from hpclaunch.cli import main; main(['render', {path!r}])", heavy) == []


def test_one_commands_parser_parses_as_the_whole_one(capsys):
    """main() builds only the parser of the command being run: the same values, help and errors."""
    from hpclaunch.cli import _COMMANDS, parser
    lines = [["submit", "j.yaml", "--backend", "slurm", "--json", "-o", "a=1", "--after", "7:afterany"],
             ["submit", "--remote", "j.yaml"], ["status", "7", "--json"], ["list", "--all"],
             ["logs", "7", "--rank", "1", "-f"], ["report", "--since", "7d"], ["render"], ["init", "--force"],
             ["submit", "-h"], ["status", "--nope"], ["submit", "j.yaml", "--backend", "nope"], ["cancel"]]
    assert {line[0] for line in lines} >= {"submit", "status", "list", "logs", "report", "render", "init"}
    for argv in lines:
        assert argv[0] in _COMMANDS
        seen = []
        for p in (parser.build(), parser.build(argv[0])):
            try:
                seen.append(("args", vars(p.parse_args(argv))))
            except SystemExit as e:
                seen.append(("exit", e.code))
            out = capsys.readouterr()
            seen.append((out.out, out.err))
        assert seen[:2] == seen[2:], argv


def test_a_submission_loads_no_remote_machinery_nor_pyyaml_once_its_file_was_read(write, tmp_path):
    path = write("job.yaml", "name: j\ncommand: [python, t.py]\nresources: {nodes: 1}\n")
    code = f"from hpclaunch.cli import main; main(['submit', {path!r}, '--backend', 'local', '--json'])"
    watch = ("yaml", "tarfile", "hpclaunch.runs.remote", "hpclaunch.runs.remote_ssh")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), HPCLAUNCH_HOME=str(tmp_path / "home"))
    # the first one parses the file into the user cache (the templates are plain Jinja: jinja2 is
    # loaded by every submission, launchers/templating.py)
    loaded = [modules_loaded(code, watch, env=env, cwd=str(tmp_path)) for _ in range(2)]
    assert "yaml" in loaded[0] and loaded[1] == [], loaded


def test_the_program_freezes_its_start_up_out_of_collection_and_a_caller_keeps_its_own(write):
    """As the program (main() reading sys.argv) the start-up's objects are frozen and collection is on
    again for the command's work; main(argv) called from a longer-lived process leaves gc alone."""
    path = write("job.yaml", "name: j\ncommand: [python, t.py]\n")
    for call, frozen in (("main()", True), ("main(sys.argv[1:])", False)):
        code = ("import gc, sys, contextlib, io; from hpclaunch.cli import main\n"
                f"sys.argv = ['hpclaunch', 'validate', {path!r}]\n"
                f"gc.collect()\nwith contextlib.redirect_stdout(io.StringIO()):\n  rc = {call}\n"
                "print('RC', rc, 'FROZEN', gc.get_freeze_count() > 1000, 'ENABLED', gc.isenabled())")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
        assert f"RC 0 FROZEN {frozen} ENABLED True" in out, (call, out)


def test_init_where_the_folder_is_missing_or_a_file_is_one_line(tmp_path):
    missing = tmp_path / "no" / "such" / "x.yaml"
    proc = hl("init", str(missing), check=False, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    assert proc.stderr.strip() == (f"{missing}: cannot write the job file: No such file or directory \u2014 "
                                   f"create the folder first (mkdir -p {missing.parent}) or pick another path")
    assert not (tmp_path / "no").exists()   # a typo in the path makes no folders
    (tmp_path / "afile").write_text("")
    proc = hl("init", str(tmp_path / "afile" / "x.yaml"), check=False, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{tmp_path / 'afile'} is a file, not a folder" in proc.stderr
    proc = hl("init", str(tmp_path), "--force", check=False, timeout=60)   # a folder where the file should go
    assert proc.returncode == 2 and "name a file in it" in proc.stderr and "Traceback" not in proc.stderr


def test_init_with_an_unknown_profile_names_the_option(run_cli, tmp_path):
    code, out, err = run_cli("init", str(tmp_path / "j.yaml"), "--profile", "a100")
    assert code == 2 and err.startswith("command line: --profile: no such profile ('a100') \u2014 did you mean")
    assert not (tmp_path / "j.yaml").exists()


def test_report_to_a_missing_folder_is_one_line(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "monitor").mkdir(parents=True)
    out = tmp_path / "nope" / "r.json"
    proc = hl("report", str(run_dir), "-o", str(out), check=False, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"{out}: cannot write the report: ") and "mkdir -p" in proc.stderr
