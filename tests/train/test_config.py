import pytest
import yaml

from hpclaunch.train_entry.config import ConfigError, build_config, derive, load_job_yaml, load_run_job

JOB = """
name: digits
profile:
  limits: {max_epochs: 50, max_batch_per_gpu: 128, lr_range: [1.0e-5, 1.0e-2]}
  training: {batch_per_gpu: 32, precision: bf16, lr_scaling: sqrt, grad_accum: 2}
train:
  epochs: 12
  lr: 0.002
  seed: 7
  checkpoint_every: 50
  keep_checkpoints: 2
"""


def test_job_yaml_then_cli(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text(JOB)
    cfg = build_config({"epochs": 3, "precision": None}, load_job_yaml(str(p)))
    assert cfg.epochs == 3                       # CLI wins
    assert cfg.batch_size == 32 and cfg.precision == "bf16" and cfg.lr_scaling == "sqrt"   # profile.training
    assert cfg.lr == 0.002 and cfg.seed == 7 and cfg.checkpoint_every == 50 and cfg.keep_checkpoints == 2
    assert cfg.limits.max_epochs == 50 and cfg.limits.lr_range == (1e-5, 1e-2)
    der = derive(cfg, world_size=4)
    assert der.accum_steps == 2 and der.global_batch == 32 * 4 * 2 and der.lr == pytest.approx(0.004)


def test_missing_file_and_keys_are_tolerated(tmp_path):
    assert load_job_yaml(str(tmp_path / "nope.yaml")) == {}
    cfg = build_config({}, {"profile": None, "train": {"unknown_key": 1}})
    assert cfg.epochs == 10 and cfg.limits.max_epochs is None


def test_a_sweep_task_reads_the_sweeps_job_yaml_and_its_point_over_train(tmp_path):
    (tmp_path / "job.yaml").write_text(JOB)
    task = tmp_path / "task3"
    task.mkdir()
    env = {"HPCLAUNCH_SWEEP_INDEX": "3",
           "HPCLAUNCH_SWEEP_POINT": '{"lr": "0.1", "train.epochs": "2.0", "train.lr": "0.005", '
                                    '"train.async_checkpoint": "false", "train.precision": "fp16"}'}
    cfg = build_config({"seed": 9}, load_run_job(str(task), env))
    assert (cfg.epochs, cfg.lr, cfg.async_checkpoint, cfg.precision) == (2, 0.005, False, "fp16")  # the point
    assert cfg.checkpoint_every == 50 and cfg.batch_size == 32 and cfg.seed == 9  # train:, profile, CLI
    # not a sweep task: the run directory's own job.yaml or nothing, and no point
    assert load_run_job(str(task), {}) == {}
    assert load_run_job(None, env) == {}
    with pytest.raises(ConfigError, match="HPCLAUNCH_SWEEP_POINT is not JSON"):
        load_run_job(str(task), {**env, "HPCLAUNCH_SWEEP_POINT": "{"})
    with pytest.raises(ConfigError, match="epochs must be an integer, got 2.5"):
        build_config({}, load_run_job(str(task), {**env, "HPCLAUNCH_SWEEP_POINT": '{"train.epochs": "2.5"}'}))
    with pytest.raises(ConfigError, match="lr must be a number, got 'fast'"):
        build_config({}, load_run_job(str(task), {**env, "HPCLAUNCH_SWEEP_POINT": '{"train.lr": "fast"}'}))


def test_limits_are_enforced():
    job = yaml.safe_load(JOB)
    with pytest.raises(ConfigError, match="max_epochs=50"):
        derive(build_config({"epochs": 51}, job), 1)
    with pytest.raises(ConfigError, match="max_batch_per_gpu=128"):
        derive(build_config({"batch_size": 256}, job), 1)
    with pytest.raises(ConfigError, match=r"effective LR 0.04 .*outside profile.limits.lr_range"):
        derive(build_config({"lr": 0.02, "lr_scaling": "linear"}, job), 2)


def test_global_batch_to_accumulation():
    cfg = build_config({"batch_size": 16, "global_batch": 128})
    assert derive(cfg, 2).accum_steps == 4
    assert derive(cfg, 8).accum_steps == 1
    with pytest.raises(ConfigError, match="not a multiple of batch_per_gpu x world size = 16 x 3"):
        derive(cfg, 3)
    assert derive(build_config({"lr": 0.01, "lr_scaling": "sqrt"}), 4).lr == pytest.approx(0.02)


# --- one train schema: `hpclaunch validate` and the rank give a job the same verdict on its lr ---

SITE = "name: lr-site\nnode: {cpus: 8}\ntraining: {lr_scaling: %s}\nlimits: {lr_range: [1.0e-4, 0.01]}\n"


def _verdicts(run_cli, write, tmp_path, scaling, lr=None, sweep=None):
    """(validate's exit code, the rank's ConfigError text or None) for one job on a 2 x 2 world."""
    import json
    from hpclaunch.spec.loading import resolve_job

    write("site.yaml", SITE % scaling)
    job = "name: j\ncommand: [python, -m, hpclaunch.train_entry]\nprofile: site.yaml\n" \
          "resources: {nodes: 2, tasks_per_node: 2}\n"
    plain = write("plain.yaml", job)
    path = write("job.yaml", job + (f"train: {{lr: {lr:.3e}}}\n" if lr is not None else "")  # 5e-05 is a YAML string
                 + (f"sweep: {{parameters: {{train.lr: [{sweep:.3e}]}}}}\n" if sweep is not None else ""))
    code, _, err = run_cli("validate", path)
    # the rank's job.yaml: what submit writes for the job, with the lr (the file without it validates)
    doc = resolve_job(plain).to_document()
    if lr is not None:
        doc["train"]["lr"] = lr
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "job.yaml").write_text(yaml.safe_dump(doc))
    env = {"HPCLAUNCH_SWEEP_INDEX": "0", "HPCLAUNCH_SWEEP_POINT": json.dumps({"train.lr": str(sweep)})} \
        if sweep is not None else {}
    try:
        derive(build_config({}, load_run_job(str(run_dir), env)), world_size=4)
        rank = None
    except ConfigError as exc:
        rank = str(exc)
    return code, err, rank


@pytest.mark.parametrize("scaling,lr,sweep,refused", [
    ("linear", 0.005, None, True),     # base in [1e-4, 0.01], effective 0.02 out: used to pass validate
    ("sqrt", 0.006, None, True),       # effective 0.012
    ("linear", 5e-5, None, False),     # base below the range, effective 2e-4 in: used to fail validate
    ("none", 0.005, None, False),
    ("linear", None, 0.005, True),     # the same value as a sweep point
    ("linear", None, 5e-5, False),
])
def test_validate_and_the_rank_agree_on_lr_range(run_cli, write, tmp_path, scaling, lr, sweep, refused):
    code, err, rank = _verdicts(run_cli, write, tmp_path, scaling, lr, sweep)
    assert (code == 2, rank is not None) == (refused, refused), (err, rank)
    if refused:  # both name the limit, the base and the effective lr, and the base lr that would do
        where = "sweep.parameters.train.lr" if sweep is not None else "train.lr"
        for text in (err, rank):
            assert "learning rates in [0.0001, 0.01]" in text and "use a base lr in [" in text, text
            assert f"effective LR {(lr or sweep) * (2 if scaling == 'sqrt' else 4):g} (base {lr or sweep:g} x " \
                   f"{2 if scaling == 'sqrt' else 4:g}: {scaling} scaling, world size 4)" in text, text
        assert f": {where}: " in err and rank.startswith("train.lr (--lr) "), (err, rank)


def test_train_entry_imports_only_the_shared_pieces_of_the_core():
    import subprocess
    import sys
    code = ("import sys, hpclaunch.train_entry.config, hpclaunch.train_entry.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('hpclaunch.') and not m.startswith("
            "('hpclaunch.train_entry', 'hpclaunch.common'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['hpclaunch.spec', 'hpclaunch.spec.train', 'hpclaunch.spec.typedload']", out
