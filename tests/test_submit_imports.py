"""What a submission loads: only what it uses (the budget "a 1,000-point sweep submits in <= 3x its
floor", bench/submit/). Modules of the views and the node monitor that a submission has no use for
stay out of it."""
import subprocess
import sys

# The login side's modules a `hpclaunch submit` loads (cli/__init__ routes `submit` to submit_commands).
SUBMIT_PATH = ("hpclaunch.cli.submit_commands", "hpclaunch.launchers.backends.slurm")
# statistics (with decimal, fractions, random) came with the node monitor's rank rules for one tuple,
# pathlib (with ntpath, urllib.parse) with the report model for one file name, the fleet view with
# the reports package: ~12 ms of a submission's CPU together.
NOT_LOADED = ("statistics", "pathlib", "hpclaunch.reports.fleet", "hpclaunch.monitors.alert_ranks")


def test_a_submission_loads_no_view_or_monitor_module():
    # An editable install's import hook loads pathlib at start-up: forgotten first, it is seen again
    # only if the submission's modules import it themselves.
    code = (f"import sys\nfor m in {NOT_LOADED!r}: sys.modules.pop(m, None)\n"
            f"for m in {SUBMIT_PATH!r}: __import__(m)\n"
            f"print(' '.join(m for m in {NOT_LOADED!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == []


# What `status` and `list` of this machine's jobs have no use for: the submission side (the job
# file's models and the plan: a third of the command's start-up) and the remote machinery (ssh,
# packing). Issue 50: `status`'s p99 on a loaded login node.
STATUS_NOT_LOADED = ("hpclaunch.launchers.backends.slurm_script", "hpclaunch.launchers.plan", "hpclaunch.spec.job",
                     "hpclaunch.cli.remote_commands", "hpclaunch.runs.remote")


def test_status_and_list_load_no_submission_or_remote_module(hpc_home, tmp_path):
    code = ("import sys\nfrom hpclaunch.runs.registry import Registry\nfrom hpclaunch.cli import main\n"
            "reg = Registry()\n"
            "a = reg.add(backend='local', cluster='local', job_id='7', name='a', run_dir=sys.argv[1])\n"
            "reg.add(backend='slurm', cluster='c', job_id='8', name='b', run_dir=sys.argv[1])\n"
            "codes = [main(['status', '7']), main(['status']), main(['list'])]\n"
            "far = reg.add(backend='remote', cluster='far', job_id='9', name='c', run_dir='/c/runs/c-9')\n"
            "reg.update_state(far.key, 'COMPLETED', exit_code=0)\n"
            "codes.append(main(['list', '--all']))   # an ended remote job: listed, not asked about\n"
            f"print('LOADED', codes, ' '.join(m for m in {STATUS_NOT_LOADED!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split("LOADED ", 1)[1].strip()
    assert loaded.startswith("[0, 0, 0, 0]") and loaded.split("]")[1].split() == [], loaded
    assert "far:/c/runs/c-9" in proc.stdout   # a remote job's listing: where its run directory is
    assert "local  a" in proc.stdout and str(tmp_path) in proc.stdout
