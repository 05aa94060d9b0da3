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
